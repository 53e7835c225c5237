"""specrl's controllers inside vLLM: a proposer for ``speculative_config={"method": "custom_class"}``
(docs/design.md section 8, "Inside vLLM").

Once per engine step vLLM calls ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)``
with, per request row, the tokens it emitted in the step just verified (so the acceptance of the
last proposal), its token count and its token array; the proposer returns each row's draft, which
vLLM verifies as a point mass (exact at any temperature). Per request it keeps what the engine
keeps per sequence: a :class:`~specrl.features.FeatureTracker` fed with each verified step and a
controller asked for the next action. Drafters: ``ngram`` (the lookup over the request's tokens)
and ``draft``, a draft model sharing the target's tokenizer (:mod:`specrl.vllm.draft`).

What vLLM does not tell a proposer is set as in training: the temperature (``temperature``,
default 0); verification time (the wall time between two calls); acceptance probabilities (point
masses); the price features' prior (``prices=`` or ``$SPECRL_VLLM_PRICES``; else measured from
vLLM's steps alone). vLLM passes no request ids, so a request is recognised by its first tokens
and its length; two requests alike in both may swap histories, which changes what the controller
sees, never the output. A failure for one request (or for the draft's batched forward) turns
speculation off for those requests, logged once; the output is unchanged.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specrl.controllers.base import Controller
from specrl.engine.drafters.ngram import NGramIndex, lookup_proposal
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action, Outcome, StepResult
from specrl.features import LOOKUP_DRAFTER, FeatureTracker, GenerationSettings, Prices
from specrl.latency.family import profiles as latency_profiles
from specrl.latency.model import LatencyModel
from specrl.vllm.draft import DRAFT, DraftRows

logger = logging.getLogger(__name__)

#: The controller (vLLM passes the proposer nothing but its own config): ``tcp`` (default),
#: ``plain``, ``static:K[:TAU]``, ``hf-heuristic``, ``hf-confidence``, or a policy's name or folder.
CONTROLLER_VARIABLE = "SPECRL_VLLM_CONTROLLER"
#: Speculate only with at most N running requests (vLLM's ``speculative_disable_by_batch_size``);
#: above it the controllers are not asked (they still hear every verified step); unset: always.
MAX_BATCH_VARIABLE = "SPECRL_VLLM_MAX_BATCH"
#: The draft model (a folder or Hugging Face id); unset: the n-gram lookup drafts for every action.
DRAFT_VARIABLE = "SPECRL_VLLM_DRAFT"
#: The price features' prior (:func:`proposer_prices`): a latency profile (``gpu-like-h100``, ...)
#: or a latency model's JSON file; unset: none.
PRICES_VARIABLE = "SPECRL_VLLM_PRICES"
FINGERPRINT = 16  # a request is recognised by this many first tokens (and its length)
FORGET_AFTER = 256  # calls a request may go unseen (preempted, prefilling) before it is forgotten
DEFAULT_MAX_NEW_TOKENS = 256  # the generated-tokens feature's scale when vLLM's budget is unknown
#: The proposers alive in this process (a benchmark reads their :attr:`Proposer.seconds`).
LIVE: weakref.WeakSet = weakref.WeakSet()


class PolicyMismatchError(ValueError):
    """A policy that chooses drafters this proposer does not run."""


def proposer_prices(prices: str | LatencyModel | Prices | None, temperature: float) -> Prices | None:
    """The price features' prior from ``prices``: a profile name of the latency family
    (:func:`specrl.latency.family.profiles`), a latency model's JSON file, a
    :class:`~specrl.latency.LatencyModel` (each priced as it prices steps at ``temperature``), or
    already a :data:`~specrl.features.Prices`; None for none."""
    if prices is None or callable(prices):  # none, or already a Prices function (a model is not callable)
        return prices
    if isinstance(prices, str):
        known = latency_profiles()
        if prices in known:
            prices = known[prices]
        elif prices.endswith(".json") and os.path.isfile(prices):
            prices = LatencyModel.load(prices)
        else:
            raise ValueError(
                f"prices={prices!r} is neither a latency profile ({', '.join(known)}) nor a latency "
                "model's JSON file: name the profile nearest the serving GPU, or calibrate that "
                "machine (specrl calibrate --out FILE.json) and give the file"
            )
    return prices.for_sampling(SamplingConfig(temperature=temperature)).price_line


@dataclass(eq=False)
class _Request:
    """One request's state between steps."""

    prefix: bytes  # the first tokens it is filed under
    length: int  # tokens the request had when it was last asked to propose
    tracker: FeatureTracker
    controller: Controller
    index: NGramIndex
    action: Action | None = None  # the last proposal's action, its tokens, their signals
    proposed: list[int] = field(default_factory=list)
    confidences: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    stopped: bool = False
    draft_seconds: float = 0.0
    seen: int = 0  # the propose call that last saw it
    failed: bool = False
    tokens: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # its tokens now

    def lookup_match(self) -> tuple[float, float]:
        """What the n-gram lookup finds now: (tokens it could propose, the order of its match),
        (0, 0) without one (the lookup features, as :meth:`Generation.lookup_match` gives them)."""
        available, order = self.index.found(self.tokens)
        return float(available), float(order)

    def record(
        self, action: Action, drafted: tuple[list[int], list[float], list[float], bool], seconds: float
    ):
        """What it proposes this step, told to its features when vLLM has verified it."""
        self.action = action
        self.proposed, self.confidences, self.entropies, self.stopped = drafted
        self.draft_seconds = seconds


def controller_factory(
    name: str | Callable[[], Controller],
    k_max: int,
    drafters: Sequence[str] = (LOOKUP_DRAFTER,),
    target: str | None = None,
) -> Callable[[], Controller]:
    """A new controller per request from a controller's name or a policy (folder or shipped name),
    or a factory as it is. A rule is built per request (rules keep their own window); a policy is
    loaded once and shared (the features carry the history). A policy that chooses a drafter not
    among ``drafters`` is refused; one trained on another pair than ``target`` is warned of."""
    from specrl.controllers.learned import LearnedController
    from specrl.evaluation.roster import RULES, make_controller

    if callable(name):
        return name
    if name in ("plain", *RULES) or name.startswith("static:"):
        make_controller(name, k_max)  # refuse a bad name now, not at the first request
        return lambda: make_controller(name, k_max)
    policy = LearnedController.load(name)
    missing = [d for d in policy.drafters if d not in drafters]
    if missing:
        fix = (
            f"set {DRAFT_VARIABLE} to its draft model's folder (or pass draft=)"
            if missing == [DRAFT]
            else f"train a policy over the drafters this proposer runs ({DRAFT}, {LOOKUP_DRAFTER}: a "
            "scenario's `drafters:`)"
        )
        raise PolicyMismatchError(
            f"policy {policy.policy.folder} chooses among drafters {list(policy.drafters)}; this proposer "
            f"runs {list(drafters)}, so it cannot draft with {missing} or compute their features: {fix}"
        )
    warning = policy.target_warning(target) if target else None
    if warning:
        logger.warning("specrl: %s", warning)
    return lambda: policy


class Proposer:
    """vLLM's custom proposer running a specrl controller per request (see the module doc).

    vLLM builds it as ``Proposer(vllm_config)``; tests and scripts may pass the facts directly.

    Args:
        vllm_config: vLLM's config: k_max is ``num_speculative_tokens``, the context window
            ``max_model_len``, the vocabulary the target's, the n-gram orders
            ``prompt_lookup_min/max`` (default 1 and 3), the draft's device and dtype the target's.
        controller, draft, max_batch, prices: as the environment variables above say (each
            defaults to its variable); also a function that returns a new controller, a loaded
            ``(model, vocab_size)`` draft, a latency model or a ``Prices`` function.
        k_max, context_window, vocab_size: without a vllm_config.
        temperature: the temperature the features are told (vLLM does not tell a proposer).
        max_new_tokens: the scale of the generated-tokens feature.
    """

    def __init__(
        self,
        vllm_config: Any = None,
        *,
        controller: str | Callable[[], Controller] | None = None,
        draft: str | tuple[Any, int] | None = None,
        k_max: int | None = None,
        context_window: int | None = None,
        vocab_size: int | None = None,
        temperature: float = 0.0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        max_batch: int | None = None,
        max_ngram: int = 3,
        min_ngram: int = 1,
        prices: str | LatencyModel | Prices | None = None,
    ) -> None:
        draft = draft or os.environ.get(DRAFT_VARIABLE) or None
        self.prices = proposer_prices(prices or os.environ.get(PRICES_VARIABLE) or None, temperature)
        target, device, dtype = None, None, None
        if vllm_config is not None:
            from specrl.vllm.compat import require_vllm

            require_vllm()
            spec, model = vllm_config.speculative_config, vllm_config.model_config
            k_max = spec.num_speculative_tokens
            context_window = model.max_model_len
            vocab_size = model.get_vocab_size()
            max_ngram = spec.prompt_lookup_max or max_ngram
            min_ngram = spec.prompt_lookup_min or min_ngram
            target, dtype = model.tokenizer or model.model, model.dtype
            device = getattr(vllm_config.device_config, "device", None)
        if k_max is None or context_window is None or vocab_size is None:
            raise ValueError("give vllm_config, or k_max, context_window and vocab_size")
        self.k_max, self.context_window = int(k_max), int(context_window)
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        self.draft = self._load_draft(draft, target, device, dtype)
        drafters = (DRAFT, LOOKUP_DRAFTER) if self.draft is not None else (LOOKUP_DRAFTER,)
        chosen = controller or os.environ.get(CONTROLLER_VARIABLE, "tcp")
        served = str(getattr(vllm_config.model_config, "model", "")) if vllm_config is not None else None
        self._new_controller = controller_factory(chosen, self.k_max, drafters, target=served)
        self.max_batch = max_batch or int(os.environ.get(MAX_BATCH_VARIABLE) or 0) or None
        self.controller_name = chosen if isinstance(chosen, str) else getattr(chosen, "__name__", "custom")
        self.settings = GenerationSettings(
            max_new_tokens=max_new_tokens,
            context_window=self.context_window,
            vocab_size=int(vocab_size),
            temperature=temperature,
            drafters=drafters,
        )
        self.requests: dict[bytes, list[_Request]] = {}
        self.calls = 0
        self._last_call_end: float | None = None
        #: Seconds spent in ``propose`` (``total``) and in the draft model's forwards (``draft``)
        #: since construction: the proposer's own cost per vLLM step (``experiments/bench_vllm.py``).
        self.seconds = {"total": 0.0, "draft": 0.0}
        LIVE.add(self)

    def _load_draft(self, draft, target, device, dtype) -> DraftRows | None:
        if draft is None:
            return None
        if isinstance(draft, tuple):
            model, vocab_size = draft
        else:
            if target is None:
                raise ValueError(
                    "a draft model by name needs vllm_config (the target's tokenizer to check it against)"
                )
            from specrl.models import load_draft

            model, vocab_size = load_draft(draft, target, device=device, dtype=dtype)
        window = getattr(model.config, "max_position_embeddings", None) or self.context_window
        return DraftRows(model, vocab_size, min(window, self.context_window))

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to load from vLLM: the draft model, if any, was loaded at construction."""

    def propose(
        self,
        sampled_token_ids: Sequence[Sequence[int]],
        num_tokens_no_spec: np.ndarray,
        token_ids_cpu: np.ndarray,
        **kwargs: Any,
    ) -> list[list[int]]:
        """Each row's draft: [] for a row that emitted nothing this step (still prefilling) or at
        the context window; else the controller's k tokens of its drafter (fewer if the lookup
        finds fewer or the action's tau or stop rule cuts them)."""
        start = time.perf_counter()
        self.calls += 1
        verify_seconds = 0.0 if self._last_call_end is None else start - self._last_call_end
        rows = sum(1 for sampled in sampled_token_ids if len(sampled))
        drafts: list[list[int]] = [[] for _ in sampled_token_ids]
        planned: dict[int, tuple[_Request, Action]] = {}  # row -> its request and action
        present: dict[_Request, np.ndarray] = {}  # every request of this step -> its tokens
        for row, sampled in enumerate(sampled_token_ids):
            length = int(num_tokens_no_spec[row])
            if not len(sampled) or length >= self.context_window:
                continue
            request = self._request(token_ids_cpu[row, :length], length - len(sampled), length)
            present[request] = request.tokens
            action = self._act(request, list(sampled), rows, verify_seconds)
            if action is not None:
                planned[row] = (request, action)
        drafting = {}  # rows that draft with the draft model, together
        for row, (request, action) in planned.items():
            if action.drafter == LOOKUP_DRAFTER or not action.k:
                drafts[row] = self._lookup(request, action)
            else:
                drafting[row] = (request, action)
        if drafting:
            drafts = self._draft(present, drafting, drafts)
        self._forget_stale()
        self._last_call_end = time.perf_counter()
        self.seconds["total"] += self._last_call_end - start
        return drafts

    # ---- one request --------------------------------------------------------------------------

    def _act(self, request: _Request, sampled: list[int], rows: int, verify_seconds: float) -> Action | None:
        """Tell the request's features what vLLM verified, and ask its controller for this step's
        action (k cut to the room left); None for a request without speculation."""
        if request.failed:
            return None
        try:
            self._account(request, sampled, verify_seconds)
            tracker = request.tracker
            tracker.set_rows(rows, tracker.context_length, tracker.generated)
            if self.max_batch is not None and rows > self.max_batch:  # off: the controller is not asked
                return Action(0, drafter=LOOKUP_DRAFTER)
            action = request.controller.act(tracker.vector())
            room = self.context_window - len(request.tokens) - 1  # vLLM needs a slot for the bonus token
            drafter = action.drafter if self.draft is not None else LOOKUP_DRAFTER
            if drafter != LOOKUP_DRAFTER:
                if self.draft.room(len(request.tokens)) < 1:
                    raise ValueError(
                        f"the request has {len(request.tokens)} tokens, the draft's context window "
                        f"is {self.draft.context_window}"
                    )
                room = min(room, self.draft.room(len(request.tokens)))
            return Action(max(0, min(action.k, self.k_max, room)), action.tau, action.stop, drafter)
        except Exception:  # never stop the engine: this request decodes without speculation
            self._fail([request], "its controller or its features")
            return None

    def _lookup(self, request: _Request, action: Action) -> list[int]:
        began = time.perf_counter()
        tokens, confidences, stopped = lookup_proposal(request.index, request.tokens, action.k, action)
        request.record(
            action, (tokens, confidences, [0.0] * len(confidences), stopped), time.perf_counter() - began
        )
        return tokens

    def _draft(
        self,
        present: dict[_Request, np.ndarray],
        drafting: dict[int, tuple[_Request, Action]],
        drafts: list[list[int]],
    ) -> list[list[int]]:
        """The draft model's proposals for the requests that draft with it, in one batch; its rows
        follow the requests of this step (``present``)."""
        assert self.draft is not None
        began = time.perf_counter()
        try:
            drafted = self.draft.propose(
                present, {request: (action.k, action) for request, action in drafting.values()}
            )
        except Exception:
            self.draft.forget()
            self._fail([request for request, _ in drafting.values()], "the draft model's batched forward")
            return drafts
        seconds = time.perf_counter() - began
        self.seconds["draft"] += seconds
        for row, (request, action) in drafting.items():
            request.record(action, drafted[request], seconds)
            drafts[row] = drafted[request][0]
        return drafts

    def _fail(self, requests: list[_Request], where: str) -> None:
        """Speculation off for ``requests`` from now on, logged once."""
        for request in requests:
            request.failed, request.action = True, None
        logger.warning(
            "specrl proposer: speculation is off for %d request(s) after an error in %s (controller %s); "
            "their output is unchanged",
            len(requests),
            where,
            self.controller_name,
            exc_info=True,
        )

    def _account(self, request: _Request, sampled: list[int], verify_seconds: float) -> None:
        """Tell the request's features and controller what vLLM verified of its last proposal."""
        if request.action is None:  # its first decoding step: only the prompt's length is known
            return
        m = len(request.proposed)
        accepted = min(len(sampled) - 1, m)
        outcome = Outcome(
            k=request.action.k,
            proposed=m,
            accepted=accepted,
            emitted=len(sampled),
            confidences=request.confidences,
            entropies=request.entropies,
            acceptance_probs=[1.0] * accepted + [0.0] * (m - accepted),
            stopped_by_tau=request.stopped,
        )
        context = len(request.tokens) - len(sampled)  # the sequence's tokens before the step
        result = StepResult.assemble(
            request.action, outcome, request.draft_seconds, verify_seconds, context, sampled
        )
        request.tracker.update([result])
        request.controller.observe(result)

    # ---- which request a row is ---------------------------------------------------------------

    def _request(self, tokens: np.ndarray, before: int, length: int) -> _Request:
        """The known request this row continues (its first tokens, and ``before`` tokens when it
        last proposed), else a new one of ``length`` tokens; its tokens are now ``tokens``.

        Requests are filed under their first :data:`FINGERPRINT` tokens, or all of them while they
        have fewer (filed again as they grow), so a row is looked up under the tokens it had."""
        tokens = np.asarray(tokens, dtype=np.int64)
        filed = self.requests.get(tokens[: min(FINGERPRINT, before)].tobytes(), [])
        found = next((r for r in filed if r.length == before and r.seen != self.calls), None)
        if found is None:
            controller = self._new_controller()
            controller.reset()
            found = _Request(
                prefix=b"",
                length=before,
                tracker=FeatureTracker(self.settings, length, prices=self.prices),
                controller=controller,
                index=NGramIndex(self.max_ngram, self.min_ngram),
            )
            found.tracker.lookup = found.lookup_match
        prefix = tokens[: min(FINGERPRINT, length)].tobytes()
        if found.prefix != prefix:  # new, or still short: filed under its tokens now
            if found in self.requests.get(found.prefix, []):
                self.requests[found.prefix].remove(found)
                if not self.requests[found.prefix]:
                    del self.requests[found.prefix]
            found.prefix = prefix
            self.requests.setdefault(prefix, []).append(found)
        found.seen, found.length, found.tokens = self.calls, length, tokens
        return found

    def _forget_stale(self) -> None:
        """Drop requests not seen for :data:`FORGET_AFTER` calls (finished, or gone)."""
        if self.calls % FORGET_AFTER:
            return
        for prefix in list(self.requests):
            alive = [r for r in self.requests[prefix] if self.calls - r.seen < FORGET_AFTER]
            if alive:
                self.requests[prefix] = alive
            else:
                del self.requests[prefix]
