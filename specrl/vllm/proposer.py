"""specrl's controllers inside vLLM: a proposer for ``speculative_config={"method": "custom_class"}``.

vLLM V1 builds the proposer from its config, then asks it once per engine step for draft tokens:
``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)`` gets, for each request row of
the batch, the tokens that request emitted in the step just verified (its accepted drafts plus
one: so the acceptance of the last proposal), its token count and its whole token array. It
returns each row's draft, of any length; vLLM verifies them with its own rejection sampler. A
draft without probabilities is a point mass, so the output is exactly vLLM's without speculation.

Per request this proposer keeps what specrl's own engine keeps per sequence: a
:class:`~specrl.features.FeatureTracker` fed with each verified step, and a controller asked for
the next action (k, tau, stop). The drafter is the n-gram lookup (``ngram``) over the request's
own tokens. What vLLM does not report is set as in training and named here:

- the sampling temperature (per request in vLLM, not given to a proposer): ``temperature``,
  default 0;
- verification time is the wall time between two ``propose`` calls (vLLM's whole step, shared by
  the rows, as the engine's verify seconds are); drafting time is the lookup's own;
- acceptance probabilities are those of point masses: 1 for accepted tokens, 0 from the first
  rejected one on.

vLLM does not pass request ids to a custom proposer, and its batch rows move as requests finish.
A request is therefore recognised by its first tokens and its length (a row must continue a known
request: same first tokens, its old length plus the tokens it just emitted). Two requests with the
same first tokens and length are indistinguishable; they may swap histories, which changes what
the controller sees, never the output.

A failure inside the proposer for one request (a controller that raises, say) turns speculation
off for that request only, logged once; the engine goes on and the output is unchanged.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specrl.controllers.base import Controller
from specrl.engine.drafters.ngram import NGramIndex, lookup_proposal
from specrl.engine.types import Action, Outcome, StepResult
from specrl.features import FeatureTracker, GenerationSettings

logger = logging.getLogger(__name__)

#: The environment variable that names the controller when vLLM builds the proposer (vLLM passes
#: the proposer nothing but its own config): ``tcp`` (default), ``plain``, ``static:K[:TAU]``,
#: ``hf-heuristic``, ``hf-confidence``, or a policy (a shipped name such as ``default``, or a folder).
CONTROLLER_VARIABLE = "SPECRL_VLLM_CONTROLLER"
DRAFTER = "ngram"
FINGERPRINT = 16  # a request is recognised by this many first tokens (and its length)
FORGET_AFTER = 256  # calls a request may go unseen (preempted, prefilling) before it is forgotten
DEFAULT_MAX_NEW_TOKENS = 256  # the generated-tokens feature's scale when vLLM's budget is unknown


@dataclass
class _Request:
    """One request's state between steps."""

    prefix: bytes
    length: int  # tokens the request had when it was last asked to propose
    tracker: FeatureTracker
    controller: Controller
    index: NGramIndex
    action: Action | None = None  # the last proposal's action, its tokens and drafting time
    proposed: list[int] = field(default_factory=list)
    confidences: list[float] = field(default_factory=list)
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


def controller_factory(name: str | Callable[[], Controller], k_max: int) -> Callable[[], Controller]:
    """A new controller per request from a controller's name or a policy (folder or shipped name),
    or a factory given as it is. A rule is built per request (rules keep their own window); a
    policy is loaded once and shared (it is stateless: the features carry the history)."""
    from specrl.controllers.learned import LearnedController
    from specrl.evaluation.roster import RULES, make_controller

    if callable(name):
        return name
    if name in ("plain", *RULES) or name.startswith("static:"):
        make_controller(name, k_max)  # refuse a bad name now, not at the first request
        return lambda: make_controller(name, k_max)
    policy = LearnedController.load(name)
    if DRAFTER not in policy.drafters:
        logger.warning(
            "specrl proposer: policy %s chose among drafters %s in training; this proposer drafts with "
            "the n-gram lookup (%r), so its choices may not fit (outputs stay exact). A policy trained "
            "with the lookup: experiments/train_ppo.py --scenarios mixed_pool ... --policy-name pool",
            policy.policy.folder,
            list(policy.drafters),
            DRAFTER,
        )
    return lambda: policy


class Proposer:
    """vLLM's custom proposer running a specrl controller per request (see the module doc).

    vLLM builds it as ``Proposer(vllm_config)``; tests and scripts may pass the facts directly.

    Args:
        vllm_config: vLLM's config: k_max is ``num_speculative_tokens``, the context window
            ``max_model_len``, the vocabulary the target's, the n-gram orders
            ``prompt_lookup_min/max`` (default 1 and 3).
        controller: a controller name or policy (default: ``$SPECRL_VLLM_CONTROLLER``, else tcp),
            or a function that returns a new controller.
        k_max, context_window, vocab_size: without a vllm_config.
        temperature: the temperature the features are told (vLLM does not tell a proposer).
        max_new_tokens: the scale of the generated-tokens feature.
    """

    def __init__(
        self,
        vllm_config: Any = None,
        *,
        controller: str | Callable[[], Controller] | None = None,
        k_max: int | None = None,
        context_window: int | None = None,
        vocab_size: int | None = None,
        temperature: float = 0.0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        max_ngram: int = 3,
        min_ngram: int = 1,
    ) -> None:
        if vllm_config is not None:
            spec, model = vllm_config.speculative_config, vllm_config.model_config
            k_max = spec.num_speculative_tokens
            context_window = model.max_model_len
            vocab_size = model.get_vocab_size()
            max_ngram = spec.prompt_lookup_max or max_ngram
            min_ngram = spec.prompt_lookup_min or min_ngram
        if k_max is None or context_window is None or vocab_size is None:
            raise ValueError("give vllm_config, or k_max, context_window and vocab_size")
        self.k_max, self.context_window = int(k_max), int(context_window)
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        chosen = controller or os.environ.get(CONTROLLER_VARIABLE, "tcp")
        self._new_controller = controller_factory(chosen, self.k_max)
        self.controller_name = chosen if isinstance(chosen, str) else getattr(chosen, "__name__", "custom")
        self.settings = GenerationSettings(
            max_new_tokens=max_new_tokens,
            context_window=self.context_window,
            vocab_size=int(vocab_size),
            temperature=temperature,
            drafters=(DRAFTER,),
        )
        self.requests: dict[bytes, list[_Request]] = {}
        self.calls = 0
        self._last_call_end: float | None = None

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to load: the n-gram lookup needs no model."""

    def propose(
        self,
        sampled_token_ids: Sequence[Sequence[int]],
        num_tokens_no_spec: np.ndarray,
        token_ids_cpu: np.ndarray,
        **kwargs: Any,
    ) -> list[list[int]]:
        """Each row's draft: [] for a row that emitted nothing this step (still prefilling) or at
        the context window; else the controller's k tokens of the n-gram lookup (fewer if it finds
        fewer or the action's tau or stop rule cuts them)."""
        start = time.perf_counter()
        self.calls += 1
        verify_seconds = 0.0 if self._last_call_end is None else start - self._last_call_end
        rows = sum(1 for sampled in sampled_token_ids if len(sampled))
        drafts = []
        for row, sampled in enumerate(sampled_token_ids):
            length = int(num_tokens_no_spec[row])
            if not len(sampled) or length >= self.context_window:
                drafts.append([])
                continue
            tokens = token_ids_cpu[row, :length]
            request = self._request(tokens, length - len(sampled), length)
            drafts.append(self._propose_one(request, tokens, list(sampled), rows, verify_seconds))
        self._forget_stale()
        self._last_call_end = time.perf_counter()
        return drafts

    # ---- one request --------------------------------------------------------------------------

    def _propose_one(
        self, request: _Request, tokens: np.ndarray, sampled: list[int], rows: int, verify_seconds: float
    ) -> list[int]:
        if request.failed:
            request.length = len(tokens)  # still recognised next step, still without speculation
            return []
        try:
            began = time.perf_counter()
            self._account(request, sampled, verify_seconds)
            request.tokens = np.asarray(tokens, dtype=np.int64)
            tracker = request.tracker
            tracker.set_rows(rows, tracker.context_length, tracker.generated)
            action = request.controller.act(tracker.vector())
            room = self.context_window - len(tokens) - 1  # vLLM needs a slot for the bonus token
            k = max(0, min(action.k, self.k_max, room))
            proposed, confidences, stopped = lookup_proposal(request.index, request.tokens, k, action)
            request.action, request.proposed = Action(k, action.tau, action.stop, DRAFTER), proposed
            request.confidences, request.stopped = confidences, stopped
            request.length = len(tokens)
            request.draft_seconds = time.perf_counter() - began
            return proposed
        except Exception:  # never stop the engine: this request decodes without speculation
            request.failed, request.length, request.action = True, len(tokens), None
            logger.warning(
                "specrl proposer: speculation is off for one request after an error in its controller or "
                "lookup (controller %s); its output is unchanged",
                self.controller_name,
                exc_info=True,
            )
            return []

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
            entropies=[0.0] * len(request.confidences),
            acceptance_probs=[1.0] * accepted + [0.0] * (m - accepted),
            stopped_by_tau=request.stopped,
        )
        context = request.length  # the sequence's tokens before the step
        result = StepResult.assemble(
            request.action, outcome, request.draft_seconds, verify_seconds, context, sampled
        )
        request.tracker.update([result])
        request.controller.observe(result)

    # ---- which request a row is ---------------------------------------------------------------

    def _request(self, tokens: np.ndarray, before: int, length: int) -> _Request:
        """The known request this row continues (its first tokens, and ``before`` tokens when it
        last proposed), else a new one of ``length`` tokens."""
        prefix = np.asarray(tokens[:FINGERPRINT], dtype=np.int64).tobytes()
        for request in self.requests.get(prefix, ()):
            if request.length == before and request.seen != self.calls:
                request.seen = self.calls
                return request
        controller = self._new_controller()
        controller.reset()
        request = _Request(
            prefix=prefix,
            length=before,
            tracker=FeatureTracker(self.settings, length),
            controller=controller,
            index=NGramIndex(self.max_ngram, self.min_ngram),
            seen=self.calls,
        )
        request.tracker.lookup = request.lookup_match
        self.requests.setdefault(prefix, []).append(request)
        return request

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
