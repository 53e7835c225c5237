"""specrl's controllers inside vLLM: a proposer for ``speculative_config={"method": "custom_class"}``
(docs/design.md section 8, "Inside vLLM").

Once per engine step vLLM calls ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)``
with, per request row, the tokens it emitted in the step just verified (so the acceptance of the
last proposal), its token count and its token array; the proposer returns each row's draft, which
vLLM verifies as a point mass (exact at any temperature). Per request it keeps what the engine
keeps per sequence: a :class:`~specrl.features.FeatureTracker` fed with each verified step and a
controller asked for the next action. Drafters: ``ngram`` (the lookup over the request's tokens)
and ``draft``, a draft model sharing the target's tokenizer (:mod:`specrl.vllm.draft`).

Settings come from ``additional_config["specrl"]`` (:mod:`specrl.vllm.settings`), logged once at
start. What vLLM does not tell a proposer is set as in training: the temperature (``temperature``,
default 0); verification time (the wall time between two calls); acceptance probabilities (point
masses); the price features' prior (``prices``; else the serving prices a policy carries, else
measured from vLLM's steps alone). A request is
recognised by its whole token history (:mod:`specrl.vllm.requests`). vLLM's own batch-size schedule
(``num_speculative_tokens_per_batch_size``) caps each row's k at the step's batch size, as vLLM's
scheduler would cut the draft. A failure for one request (or for the draft's batched forward) turns
speculation off for those requests, logged once; the output is unchanged. What it chose is counted
and exported (:mod:`specrl.vllm.stats`).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specrl.controllers.base import Controller
from specrl.engine.drafters.ngram import NGramIndex, lookup_proposal
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action, Outcome, StepResult
from specrl.features import LOOKUP_DRAFTER, FeatureTracker, GenerationSettings, Prices
from specrl.latency.family import profiles as latency_profiles
from specrl.latency.model import LatencyModel
from specrl.models import CacheSettings
from specrl.vllm.draft import DRAFT, DraftRows
from specrl.vllm.recorder import CallCost, ServingRecorder, StepTally
from specrl.vllm.requests import RequestBook, ServedRequest
from specrl.vllm.settings import DRAFT_VARIABLE, BatchSchedule, ProposerSettings, resolve
from specrl.vllm.stats import ProposerStats

logger = logging.getLogger(__name__)

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


class SharedPolicy:
    """A controller factory that gives every request the one loaded ``policy`` (its features carry
    each request's history)."""

    def __init__(self, policy: Controller) -> None:
        self.policy = policy

    def __call__(self) -> Controller:
        return self.policy


def carried_prices(factory: Callable[[], Controller]) -> LatencyModel | None:
    """The serving engine's prices the policy a factory shares was trained on, where it carries them
    (its metadata's ``latency_profiles["prices"]``: trained on scenarios priced by ``specrl
    calibrate --method serving``); None otherwise (a rule, a class, another factory)."""
    if not isinstance(factory, SharedPolicy):
        return None
    prices = (factory.policy.metadata.get("latency_profiles") or {}).get("prices")
    return None if prices is None else LatencyModel.from_dict(prices, source="the policy's prices")


def controller_factory(
    name: str | Callable[[], Controller],
    k_max: int,
    drafters: Sequence[str] = (LOOKUP_DRAFTER,),
    target: str | None = None,
) -> Callable[[], Controller]:
    """A new controller per request from a controller's name, a policy (folder or shipped name),
    ``package.module:Name`` (a controller class or function, called once per request), or a factory
    as it is. A rule is built per request (rules keep their own window); a policy is loaded once and
    shared (the features carry the history). A policy that chooses a drafter not among ``drafters``
    is refused; one trained on another pair than ``target`` is warned of."""
    from specrl.controllers.learned import LearnedController
    from specrl.evaluation.roster import RULES, make_controller

    if callable(name):
        return name
    if name in ("plain", *RULES) or name.startswith("static:"):
        make_controller(name, k_max)  # refuse a bad name now, not at the first request
        return lambda: make_controller(name, k_max)
    if ":" in name and not os.path.exists(name):
        return imported_factory(name)
    policy = LearnedController.load(name)
    missing = [d for d in policy.drafters if d not in drafters]
    if missing:
        fix = (
            'give its draft model: additional_config {"specrl": {"draft": FOLDER}} '
            f"(or ${DRAFT_VARIABLE}, or draft=)"
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
    return SharedPolicy(policy)


def imported_factory(name: str) -> Callable[[], Controller]:
    """The controller class or function ``package.module:Name`` names."""
    module, _, attribute = name.partition(":")
    try:
        factory = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(
            f"controller {name!r}: cannot import {attribute!r} from {module!r} ({error}); name a rule, a "
            "policy, or package.module:Name of a controller class importable where vLLM runs"
        ) from error
    if not callable(factory):
        raise ValueError(f"controller {name!r} is not a controller class or function")
    return factory


class Proposer:
    """vLLM's custom proposer running a specrl controller per request (see the module doc).

    vLLM builds it as ``Proposer(vllm_config)``; tests and scripts may pass the facts directly.

    Args:
        vllm_config: vLLM's config: k_max is ``num_speculative_tokens``, the context window
            ``max_model_len``, the vocabulary the target's, the n-gram orders
            ``prompt_lookup_min/max`` (default 1 and 3), the draft's device and dtype the target's,
            the batch-size schedule ``num_speculative_tokens_per_batch_size``, and the settings
            ``additional_config["specrl"]`` (:class:`~specrl.vllm.settings.ProposerSettings`).
        settings: keyword arguments over those settings (scripts and tests): as there, or also a
            function that returns a new controller, a loaded ``(model, vocab_size)`` draft, a
            latency model or a ``Prices`` function.
        k_max, context_window, vocab_size, batch_sizes: without a vllm_config (``batch_sizes``: a
            schedule as vLLM's).
    """

    def __init__(
        self,
        vllm_config: Any = None,
        *,
        k_max: int | None = None,
        context_window: int | None = None,
        vocab_size: int | None = None,
        batch_sizes: Sequence[Sequence[int]] | None = None,
        max_ngram: int = 3,
        min_ngram: int = 1,
        **settings: Any,
    ) -> None:
        unknown = set(settings) - set(ProposerSettings.model_fields)
        if unknown:
            raise TypeError(
                f"unknown settings {sorted(unknown)}; known: {', '.join(ProposerSettings.model_fields)}"
            )
        objects = {
            k: v for k, v in settings.items() if v is not None and not isinstance(v, (str, int, float))
        }
        text = {k: v for k, v in settings.items() if k not in objects}
        target, device, dtype, additional = None, None, None, None
        if vllm_config is not None:
            from specrl.vllm.compat import require_vllm

            require_vllm()
            spec, model = vllm_config.speculative_config, vllm_config.model_config
            k_max = spec.num_speculative_tokens
            context_window = model.max_model_len
            vocab_size = model.get_vocab_size()
            max_ngram = spec.prompt_lookup_max or max_ngram
            min_ngram = spec.prompt_lookup_min or min_ngram
            batch_sizes = getattr(spec, "num_speculative_tokens_per_batch_size", None)
            target, dtype = model.tokenizer or model.model, model.dtype
            device = getattr(vllm_config.device_config, "device", None)
            additional = getattr(vllm_config, "additional_config", None)
        if k_max is None or context_window is None or vocab_size is None:
            raise ValueError("give vllm_config, or k_max, context_window and vocab_size")
        #: The settings as resolved (objects given directly show as their settings' defaults).
        self.config = resolve(additional, text)
        self.k_max, self.context_window = int(k_max), int(context_window)
        self.min_ngram, self.max_ngram = min_ngram, max_ngram
        self.draft = self._load_draft(objects.get("draft", self.config.draft), target, device, dtype)
        drafters = (DRAFT, LOOKUP_DRAFTER) if self.draft is not None else (LOOKUP_DRAFTER,)
        chosen = objects.get("controller", self.config.controller)
        served = str(getattr(vllm_config.model_config, "model", "")) if vllm_config is not None else None
        self._new_controller = controller_factory(chosen, self.k_max, drafters, target=served)
        prices = objects.get("prices", self.config.prices) or carried_prices(self._new_controller)
        self.prices = proposer_prices(prices, self.config.temperature)
        self.schedule = BatchSchedule(batch_sizes, self.k_max, self.config.max_batch)
        self.controller_name = chosen if isinstance(chosen, str) else getattr(chosen, "__name__", "custom")
        self.settings = GenerationSettings(
            max_new_tokens=self.config.max_new_tokens,
            context_window=self.context_window,
            vocab_size=int(vocab_size),
            temperature=self.config.temperature,
            drafters=drafters,
        )
        self.requests = RequestBook()
        self.stats = ProposerStats(self.controller_name)
        record = self.config.record
        self.recorder = ServingRecorder(record, self.config.record_rate) if record else None
        self.calls = 0
        self._last_call_end: float | None = None
        #: Seconds spent in ``propose`` (``total``) and in the draft model's forwards (``draft``)
        #: since construction: the proposer's own cost per vLLM step (``experiments/bench_vllm.py``).
        self.seconds = {"total": 0.0, "draft": 0.0}
        LIVE.add(self)
        logger.info(
            "specrl proposer: %s; k_max=%d, drafters %s, batch-size schedule %s",
            self.config.line(),
            self.k_max,
            list(drafters),
            self.schedule.ranges or None,
        )

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
        kind = self.config.draft_cache
        cache = CacheSettings("dynamic" if kind == "dynamic" else "static", compile=kind == "compiled")
        return DraftRows(model, vocab_size, min(window, self.context_window), cache)

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
        draft_before = self.seconds["draft"]
        verify_seconds = 0.0 if self._last_call_end is None else start - self._last_call_end
        rows = sum(1 for sampled in sampled_token_ids if len(sampled))
        drafts: list[list[int]] = [[] for _ in sampled_token_ids]
        planned: dict[int, tuple[ServedRequest, Action]] = {}  # row -> its request and action
        asking: dict[int, tuple[ServedRequest, np.ndarray]] = {}  # row -> its request and features
        present: dict[ServedRequest, np.ndarray] = {}  # every request of this step -> its tokens
        tally = StepTally()
        for row, sampled in enumerate(sampled_token_ids):
            length = int(num_tokens_no_spec[row])
            if not len(sampled):
                tally.prefilling()
                continue
            before = length - len(sampled)
            request = self._request(token_ids_cpu[row, :length], before)
            if request.steps:
                tally.decoded(len(request.proposed) if request.action else 0, before)
            else:
                tally.admitted(before)
            request.steps += 1
            if request.recorded:
                self._record_request(request, list(sampled), verify_seconds)
            if length >= self.context_window:
                continue
            present[request] = request.tokens
            observed = self._observe(request, list(sampled), rows, verify_seconds)
            if isinstance(observed, Action):  # off at this batch size
                planned[row] = (request, observed)
            elif observed is not None:
                asking[row] = (request, observed)
        for row, action in self._decide(asking).items():
            request = asking[row][0]
            bounded = self._bounded(request, action, rows)
            if bounded is not None:
                planned[row] = (request, bounded)
        drafting = {}  # rows that draft with the draft model, together
        for row, (request, action) in planned.items():
            if action.drafter == LOOKUP_DRAFTER or not action.k:
                drafts[row] = self._lookup(request, action)
            else:
                drafting[row] = (request, action)
        if drafting:
            drafts = self._draft(present, drafting, drafts)
        self.requests.forget_stale(self.calls)
        self.stats.maybe_log()
        self._last_call_end = time.perf_counter()
        self.seconds["total"] += self._last_call_end - start
        if self.recorder is not None:
            cost = CallCost(
                draft_rows=len(drafting),
                drafted=sum(len(drafts[row]) for row in drafting),
                draft_forwards=max((action.k for _, action in drafting.values()), default=0),
                draft_seconds=self.seconds["draft"] - draft_before,
                propose_seconds=self._last_call_end - start,
            )
            self._record_step(tally, verify_seconds, cost)
        return drafts

    # ---- recording --------------------------------------------------------------------------

    def _record_step(self, tally: StepTally, verify_seconds: float, cost: CallCost) -> None:
        """The step just verified (priced with the call before it); this call's ``cost`` is
        reported with the next step."""
        try:
            if self.calls > 1:
                self.recorder.step(tally, verify_seconds)
            self.recorder.previous = cost
        except Exception:  # never stop the engine: recording stops
            self._stop_recording()

    def _record_request(self, request: ServedRequest, sampled: list[int], seconds: float) -> None:
        """What vLLM verified of the request's last proposal; its prompt on its first step."""
        action = request.action
        record = {"request": request.number, "call": self.calls, "emitted": sampled, "seconds": seconds}
        if request.steps == 1:
            record["prompt"] = request.tokens[: len(request.tokens) - len(sampled)].tolist()
        if action is not None:
            record |= {
                "rows": request.rows,
                "drafter": action.drafter,
                "k": action.k,
                "tau": action.tau,
                "proposed": request.proposed,
                "confidences": request.confidences,
                "entropies": request.entropies,
                "stopped": request.stopped,
                "accepted": min(len(sampled) - 1, len(request.proposed)),
                "draft_seconds": request.draft_seconds,
            }
        try:
            self.recorder.request_step(record)
        except Exception:
            self._stop_recording()

    def _stop_recording(self) -> None:
        logger.warning(
            "specrl proposer: recording into %s stopped after an error", self.config.record, exc_info=True
        )
        recorder, self.recorder = self.recorder, None
        for request in self.requests:
            request.recorded = False
        with contextlib.suppress(Exception):
            recorder.close()

    # ---- one request --------------------------------------------------------------------------

    def _observe(
        self, request: ServedRequest, sampled: list[int], rows: int, verify_seconds: float
    ) -> Action | np.ndarray | None:
        """Tell the request's features what vLLM verified; its feature vector for its controller,
        the plain action where the schedule turns speculation off at this batch size, or None for
        a request without speculation."""
        if request.failed:
            return None
        try:
            self._account(request, sampled, verify_seconds)
            tracker = request.tracker
            tracker.set_rows(rows, tracker.context_length, tracker.generated)
            request.rows = rows
            if self.schedule and not self.schedule(rows):  # off at this batch size: no controller asked
                self.stats.switched_off()
                return Action(0, drafter=LOOKUP_DRAFTER)
            return tracker.vector()
        except Exception:  # never stop the engine: this request decodes without speculation
            self._fail([request], "its controller or its features")
            return None

    def _decide(self, asking: dict[int, tuple[ServedRequest, np.ndarray]]) -> dict[int, Action]:
        """Each asking row's action from its request's controller: the rows of requests that share
        one controller (a loaded policy) in one call of its ``act_rows`` where it has one."""
        by_controller: dict[int, list[int]] = {}
        for row, (request, _) in asking.items():
            by_controller.setdefault(id(request.controller), []).append(row)
        decided: dict[int, Action] = {}
        for rows in by_controller.values():
            controller = asking[rows[0]][0].controller
            together = getattr(controller, "act_rows", None)
            if together is not None and len(rows) > 1:
                with contextlib.suppress(Exception):  # then row by row: the failing request is named
                    decided.update(zip(rows, together(np.stack([asking[r][1] for r in rows])), strict=True))
                    continue
            for row in rows:
                request, vector = asking[row]
                try:
                    decided[row] = controller.act(vector)
                except Exception:  # never stop the engine: this request decodes without speculation
                    self._fail([request], "its controller or its features")
        return decided

    def _bounded(self, request: ServedRequest, action: Action, rows: int) -> Action | None:
        """The controller's action cut to the schedule's k at ``rows`` rows and the room the
        request has left (vLLM's context window, the draft's); None after an error."""
        try:
            scheduled = self.schedule(rows) if self.schedule else self.k_max
            room = self.context_window - len(request.tokens) - 1  # vLLM needs a slot for the bonus token
            drafter = action.drafter if self.draft is not None else LOOKUP_DRAFTER
            if drafter != LOOKUP_DRAFTER:
                if self.draft.room(len(request.tokens)) < 1:
                    raise ValueError(
                        f"the request has {len(request.tokens)} tokens, the draft's context window "
                        f"is {self.draft.context_window}"
                    )
                room = min(room, self.draft.room(len(request.tokens)))
            k = max(0, min(action.k, scheduled, room))
            self.stats.chose(k, drafter)
            return Action(k, action.tau, action.stop, drafter)
        except Exception:  # never stop the engine: this request decodes without speculation
            self._fail([request], "its controller or its features")
            return None

    def _lookup(self, request: ServedRequest, action: Action) -> list[int]:
        began = time.perf_counter()
        tokens, confidences, stopped = lookup_proposal(request.index, request.tokens, action.k, action)
        request.record(
            action, (tokens, confidences, [0.0] * len(confidences), stopped), time.perf_counter() - began
        )
        return tokens

    def _draft(
        self,
        present: dict[ServedRequest, np.ndarray],
        drafting: dict[int, tuple[ServedRequest, Action]],
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

    def _fail(self, requests: list[ServedRequest], where: str) -> None:
        """Speculation off for ``requests`` from now on, logged once."""
        for request in requests:
            request.failed, request.action = True, None
        self.stats.failed(len(requests))
        logger.warning(
            "specrl proposer: speculation is off for %d request(s) after an error in %s (controller %s); "
            "their output is unchanged",
            len(requests),
            where,
            self.controller_name,
            exc_info=True,
        )

    def _account(self, request: ServedRequest, sampled: list[int], verify_seconds: float) -> None:
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
        self.stats.verified(m, accepted)

    # ---- which request a row is ---------------------------------------------------------------

    def _request(self, row_tokens: np.ndarray, before: int) -> ServedRequest:
        """The known request whose tokens were this row's first ``before`` when it last proposed
        (:class:`~specrl.vllm.requests.RequestBook`), else a new one; its tokens are now the row's."""
        tokens = np.asarray(row_tokens, dtype=np.int64)
        found = self.requests.find(tokens[:before], self.calls)
        if found is None:
            controller = self._new_controller()
            controller.reset()
            found = ServedRequest(
                tracker=FeatureTracker(self.settings, len(tokens), prices=self.prices),
                controller=controller,
                index=NGramIndex(self.max_ngram, self.min_ngram),
            )
            found.tracker.lookup = found.lookup_match
            found.recorded = self.recorder is not None and self.recorder.chooses()
        self.requests.file(found, tokens, self.calls)
        return found
