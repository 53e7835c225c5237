"""Serve a request stream with several setups side by side: (draft frozen or adapted) x controller.

Every setup serves every request, one at a time, in an order rotated by the request's index (so
machine noise hits all alike). A setup with an adapter re-distils its own draft after every
``adaptation.every`` requests, in between requests, its wall time charged to that setup. Every
request of every setup is logged: tokens, time, acceptance and the draft version that served it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tqdm.auto import tqdm

from specrl.controllers.base import Controller
from specrl.engine.decoder import SpeculativeDecoder
from specrl.engine.timing import DeviceClock
from specrl.engine.types import throughput
from specrl.models import ModelPair
from specrl.serving.adaptation import AdaptationResult, DraftAdapter, LiveDraft, TrafficBuffer
from specrl.serving.stream_file import Request, StreamSpec


@dataclass
class Setup:
    """One way of serving the stream (e.g. "adapted + tcp"): its controller, its live draft, and
    for an adapting setup the adapter and the traffic it learns from; then its logs (a record and
    the output of every request served, every adaptation)."""

    name: str
    controller: Controller
    draft: LiveDraft
    adapter: DraftAdapter | None = None
    buffer: TrafficBuffer | None = None
    records: list[dict] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)
    adaptations: list[AdaptationResult] = field(default_factory=list)

    @property
    def adapts(self) -> bool:
        return self.adapter is not None


def build_setups(
    pair: ModelPair, spec: StreamSpec, controllers: dict[str, Callable[[], Controller]]
) -> list[Setup]:
    """For every controller, a setup with the frozen draft and one whose draft adapts. Each setup
    gets its own controller (from the factory) and its own live draft."""
    setups = []
    for name, make in controllers.items():
        adapter = DraftAdapter(pair, spec.adaptation, spec.sampling, seed=spec.seed)
        buffer = TrafficBuffer(spec.adaptation.window, spec.adaptation.replay, seed=spec.seed)
        setups.append(Setup(f"frozen + {name}", make(), LiveDraft(pair.draft)))
        setups.append(Setup(f"adapted + {name}", make(), LiveDraft(pair.draft), adapter, buffer))
    return setups


def serve_request(pair: ModelPair, spec: StreamSpec, setup: Setup, request: Request) -> dict:
    """Decode ``request`` with the setup's live draft and controller; log it (and keep it as traffic)."""
    decoder = SpeculativeDecoder(replace(pair, draft=setup.draft.model), setup.controller)
    clock = DeviceClock(pair.device)
    start = clock.now()
    out = decoder.generate(
        request.prompt,
        max_new_tokens=spec.max_new_tokens,
        temperature=spec.sampling.temperature,
        top_k=spec.sampling.top_k,
        top_p=spec.sampling.top_p,
        seed=request.seed,
        keep_target_logits=setup.adapts,  # the teacher of the next adaptation, from the verify forwards
    )
    if setup.buffer is not None:  # keeping the traffic (and its teacher) is part of serving it
        setup.buffer.add(request, out.prompt_ids, out.token_ids, out.target_logits)
    seconds = clock.now() - start
    record = {
        "request": request.index,
        "segment": request.segment,
        "domain": request.domain,
        "held_back": request.held_back,
        "tokens": len(out.token_ids),
        "seconds": seconds,
        "tokens_per_s": throughput(len(out.token_ids), seconds),
        "steps": out.stats.steps,
        "proposed": out.stats.proposed,
        "accepted": out.stats.accepted,
        "acceptance_rate": out.stats.acceptance_rate,
        "draft_version": setup.draft.version,
    }
    setup.records.append(record)
    setup.outputs.append(out.token_ids)
    return record


def warm_up(pair: ModelPair, spec: StreamSpec, setups: list[Setup], request: Request) -> None:
    """Untimed and unlogged: every setup decodes ``request`` once, every adapter takes a training
    step on a throwaway copy (benchmarks exclude warm-up, docs/design.md section 6)."""
    for setup in setups:
        SpeculativeDecoder(replace(pair, draft=setup.draft.model), setup.controller).generate(
            request.prompt, max_new_tokens=spec.max_new_tokens, temperature=spec.sampling.temperature
        )
        if setup.adapter is not None:
            setup.adapter.warm_up(setup.draft.model)


def serve_stream(
    pair: ModelPair,
    spec: StreamSpec,
    setups: list[Setup],
    requests: list[Request],
    on_request: Callable[[Setup, dict], None] | None = None,
    on_adaptation: Callable[[Setup, AdaptationResult], None] | None = None,
    progress: bool = True,
) -> list[Setup]:
    """Serve ``requests`` with every setup (module doc), after an untimed warm-up; returns the setups
    with their logs. ``on_request`` and ``on_adaptation`` see each record and adaptation as it happens."""
    warm_up(pair, spec, setups, requests[0])
    every = spec.adaptation.every
    for request in tqdm(requests, desc=f"stream {spec.name}", unit="request", disable=not progress):
        turn = request.index % len(setups)
        for setup in setups[turn:] + setups[:turn]:
            record = serve_request(pair, spec, setup, request)
            if on_request is not None:
                on_request(setup, record)
            last = request.index + 1 == len(requests)
            if setup.adapts and every and (request.index + 1) % every == 0 and not last:
                result = setup.adapter.adapt(setup.draft, setup.buffer, after_request=request.index)
                setup.adaptations.append(result)
                if on_adaptation is not None:
                    on_adaptation(setup, result)
    return setups
