"""The drafters a pair offers, by name, and a fresh drafter per generation.

=============  ==================================================================================
``draft``      the pair's distilled draft
``draft-mid``  the pair's second draft, of another size (the embedded pair's ``draft-mid/``, or
               ``load_pair(..., mid=...)``)
``draft-int8`` the draft with int8 weights (torchao)
``draft-int4`` the draft with int4 weights, in groups of 32 (torchao)
``ngram``      prompt lookup over the prompt and the text so far (no model)
``cascade``    the draft drafting for ``draft-mid``, which proposes to the target
=============  ==================================================================================

Models are shared by the pair's generations (a quantised copy is made once, kept in
``pair.derived``); each generation gets its own drafter state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformers import PreTrainedModel

from specrl.engine.drafters.base import Drafter, DrafterError
from specrl.engine.drafters.cascade import CascadeDrafter
from specrl.engine.drafters.model import ModelDrafter
from specrl.engine.drafters.ngram import NGramDrafter
from specrl.engine.drafters.quantized import quantize
from specrl.engine.types import DEFAULT_DRAFTER
from specrl.features import FEATURE_DRAFTERS

if TYPE_CHECKING:
    from specrl.models import ModelPair

DRAFTERS = FEATURE_DRAFTERS  # the features know every drafter: a new one is a new feature version
QUANTIZED = {"draft-int8": 8, "draft-int4": 4}
NEEDS_MID = ("draft-mid", "cascade")


class DrafterPool:
    """Resolves drafter names for one pair; ``new(name)`` builds the drafter a generation steps."""

    def __init__(self, pair: ModelPair, cascade_inner_k: int = 3) -> None:
        self.pair = pair
        self.cascade_inner_k = cascade_inner_k

    def available(self) -> list[str]:
        """The names this pair can serve (quantised drafts are listed; they may still fail to build)."""
        return [name for name in DRAFTERS if name not in NEEDS_MID or self.pair.mid is not None]

    def check(self, name: str) -> None:
        """Raise a :class:`DrafterError` naming the fix if ``name`` cannot be served by this pair."""
        if name not in DRAFTERS:
            raise DrafterError(f"unknown drafter {name!r}; choose one of {', '.join(DRAFTERS)}")
        if name in NEEDS_MID and self.pair.mid is None:
            raise DrafterError(
                f"the drafter {name!r} needs the pair's second draft, and {self.pair.name} has none: pass "
                "load_pair(target, draft, mid=PATH) with a draft of another size, or for an embedded pair "
                "run `python -m specrl.embedded add-mid --preset <preset>` once"
            )

    def model(self, name: str) -> PreTrainedModel:
        """The model behind a model drafter; a quantised draft is built on first use."""
        self.check(name)
        if name == DEFAULT_DRAFTER:
            return self.pair.draft
        if name == "draft-mid":
            return self.pair.mid
        if name not in QUANTIZED:
            raise DrafterError(f"the drafter {name!r} is not a single model")
        source, quantized = self.pair.derived.get(name, (None, None))
        if source is not self.pair.draft:  # first use, or a pair copied with another draft
            quantized = quantize(self.pair.draft, QUANTIZED[name])
            self.pair.derived[name] = (self.pair.draft, quantized)
        return quantized

    def new(self, name: str, rows: int = 0) -> Drafter:
        """A fresh drafter over ``rows`` empty rows (each catches up on its sequence when first
        asked); rows join later with ``admit``."""
        self.check(name)
        vocab = self.pair.vocab_size
        if name == "ngram":
            return NGramDrafter(vocab, rows=rows, device=self.pair.device)
        cache, length = self.pair.cache, self.pair.context_length
        if name == "cascade":
            mid = self.model("draft-mid")
            inner_k = self.cascade_inner_k
            return CascadeDrafter(
                self.pair.draft, mid, vocab, inner_k, cache=cache, max_length=length, rows=rows
            )
        return ModelDrafter(name, self.model(name), vocab, cache, length, rows)
