"""The draft model inside vLLM: a KV cache row per request that drafts with it, rolled back to what
vLLM accepted.

The proposer runs specrl's own :class:`~specrl.engine.drafters.model.ModelDrafter` over the
requests of a step that draft with it, in one batch (each with its own k and cut). A request keeps
its row between steps; before drafting, the row is rolled back to the longest prefix of what it
holds (its tokens and its last proposal) that the request's tokens still start with, and the tokens
vLLM emitted since are fed in the first forward. Rows of requests not in a step leave at once; a
request in the step that does not draft with the model keeps its row, which catches up later.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

import numpy as np
from transformers import PreTrainedModel

from specrl.engine.drafters.model import ModelDrafter
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action
from specrl.models import CacheSettings

#: The drafter's name in a controller's actions.
DRAFT = "draft"


class DraftRows:
    """The draft model over vLLM's requests (see the module doc). Proposals are greedy: vLLM is
    given no draft probabilities, so it verifies each token as a point mass (exact at any
    temperature), and the draft's most likely token is the one most likely accepted."""

    def __init__(
        self, model: PreTrainedModel, vocab_size: int, context_window: int, cache: CacheSettings | None = None
    ) -> None:
        self.drafter = ModelDrafter(DRAFT, model, vocab_size, cache, max_length=context_window, rows=0)
        self.context_window = context_window
        self.owners: list[Hashable] = []  # the request of each row, in cache order
        self.held: list[np.ndarray] = []  # each row's tokens then its last proposal
        self.sampling = SamplingConfig()

    def room(self, length: int) -> int:
        """The most tokens the draft can propose after a sequence of ``length`` tokens."""
        return max(0, self.context_window - length)

    def propose(
        self, present: Mapping[Hashable, np.ndarray], wanted: Mapping[Hashable, tuple[int, Action]]
    ) -> dict[Hashable, tuple[list[int], list[float], list[float], bool]]:
        """Draft for every request in ``wanted`` (request -> (k, action)); ``present`` holds the
        tokens of every request in this step (rows of others leave). Returns, per wanted request,
        (its tokens, their confidences, their entropies, whether drafting stopped before k)."""
        self._keep(present)
        joining = [key for key in wanted if key not in self.owners]
        if joining:
            self.drafter.admit([present[key].tolist() for key in joining])
            self.owners += joining
            self.held += [present[key] for key in joining]
        self._roll_back(present)
        if not any(k for k, _ in wanted.values()):
            return {key: ([], [], [], False) for key in wanted}
        idle = Action(0)
        plans = [wanted.get(owner, (0, idle)) for owner in self.owners]
        sequences = [present[owner].tolist() for owner in self.owners]
        proposal = self.drafter.propose(
            sequences, [k for k, _ in plans], [action for _, action in plans], self.sampling, None
        )
        tokens = proposal.tokens.tolist()
        drafted = {}
        for r, owner in enumerate(self.owners):
            mine = tokens[r][: proposal.proposed[r]]
            self.held[r] = np.concatenate([present[owner], np.asarray(mine, dtype=np.int64)])
            if owner in wanted:
                drafted[owner] = (mine, proposal.confidences[r], proposal.entropies[r], proposal.stopped[r])
        return drafted

    def forget(self) -> None:
        """Drop every row (after a failure: the next step starts afresh)."""
        self._keep({})

    def _keep(self, present: Mapping[Hashable, np.ndarray]) -> None:
        """Rows of requests not in this step leave."""
        keep = [r for r, owner in enumerate(self.owners) if owner in present]
        if len(keep) == len(self.owners):
            return
        self.drafter.select(keep)
        self.owners = [self.owners[r] for r in keep]
        self.held = [self.held[r] for r in keep]

    def _roll_back(self, present: Mapping[Hashable, np.ndarray]) -> None:
        """Each row back to the prefix of what it holds that its request's tokens start with, and
        short of their last token (the first forward feeds it)."""
        lengths = []
        for owner, held, cached in zip(self.owners, self.held, self.drafter.cache.lengths, strict=True):
            tokens = present[owner]
            n = min(cached, len(held), len(tokens) - 1)
            differs = np.flatnonzero(held[:n] != tokens[:n])
            lengths.append(int(differs[0]) if len(differs) else n)
        self.drafter.rollback(lengths)
