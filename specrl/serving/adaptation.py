"""Online draft adaptation: re-distil the draft on recent traffic, and swap it in only if it is better.

An adaptation runs in between requests (docs/design.md section 8, "Online draft adaptation"): it
skips while the live draft's acceptance on the requests since the last check is at least
``adapt_below``; else it trains a copy for at most ``steps`` steps on the traffic not held back
(the embedded pair's distillation loss; the teacher is the target's logits kept from the verify
forwards, so the target never runs again), rejects a non-finite update, and swaps the copy in only
if it beats the live draft on the held-back requests by more than ``min_gain``. The live draft is
never modified, so the output of decoding (which does not depend on the draft) never changes.
"""

from __future__ import annotations

import copy
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from specrl.embedded.train import distillation_loss
from specrl.engine.sampling import SamplingConfig
from specrl.engine.timing import DeviceClock
from specrl.models import ModelPair
from specrl.serving.stream_file import AdaptationSpec, Request


@dataclass
class Traffic:
    """A served request as training data: prompt + generated ``token_ids``, and ``teacher``, the
    target's log-probabilities at the generated positions ((generated, V) float16; None when it was
    served without keeping the target's logits: an adaptation then scores it with the target)."""

    request: Request
    token_ids: list[int]
    prompt_length: int
    teacher: torch.Tensor | None = None


class TrafficBuffer:
    """What an adaptation learns from: the ``window`` most recent served requests, plus (``replay``) a
    uniform sample of the older ones (reservoir sampling over every request that left the window)."""

    def __init__(self, window: int, replay: int = 0, seed: int = 0) -> None:
        self.recent: deque[Traffic] = deque(maxlen=window)
        self.reservoir: list[Traffic] = []
        self.replay = replay
        self.rng = random.Random(f"replay:{seed}")
        self.evicted = 0

    @property
    def entries(self) -> list[Traffic]:
        return [*self.reservoir, *self.recent]

    def add(
        self,
        request: Request,
        prompt_ids: Sequence[int],
        output_ids: Sequence[int],
        target_logits: torch.Tensor | None = None,
    ) -> None:
        """Keep a served request; ``target_logits`` (generated, V), as the decoder returns them."""
        teacher = None if target_logits is None else teacher_log_probs(target_logits)
        self.push(Traffic(request, [*prompt_ids, *output_ids], len(prompt_ids), teacher))

    def push(self, entry: Traffic) -> None:
        if len(self.recent) == self.recent.maxlen and self.replay:
            self._keep(self.recent[0])
        self.recent.append(entry)

    def _keep(self, old: Traffic) -> None:
        """Algorithm R: every evicted request ends up in the reservoir with the same probability."""
        self.evicted += 1
        if len(self.reservoir) < self.replay:
            self.reservoir.append(old)
        elif (j := self.rng.randrange(self.evicted)) < self.replay:
            self.reservoir[j] = old


class LiveDraft:
    """The draft that serves requests (``model``). Replaced whole by :meth:`swap`, never changed in
    place, so a request sees one draft from start to end; the draft it replaced (``previous``) is
    kept for :meth:`rollback`. ``version``: 0 for the original draft, +1 at every swap or rollback."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.previous: torch.nn.Module | None = None
        self.version = 0

    def swap(self, candidate: torch.nn.Module) -> None:
        self.previous, self.model = self.model, candidate
        self.version += 1

    def rollback(self) -> None:
        """Put the draft before the last swap back live."""
        if self.previous is None:
            raise RuntimeError("no previous draft to roll back to: nothing has been swapped in")
        self.model, self.previous = self.previous, None
        self.version += 1


@dataclass
class AdaptationResult:
    """What one adaptation did, after request ``after_request``: its optimizer steps and wall time
    (device-synchronised), the requests it trained on and was judged on, the held-back acceptance
    of the live draft and the candidate, overall and per domain (for a check that skipped,
    ``live_score`` is the live draft's on the requests since the last check), whether the candidate
    went live and why, and the loss at every step."""

    after_request: int
    steps: int
    seconds: float
    train_requests: int
    held_requests: int
    live_score: float | None
    candidate_score: float | None
    swapped: bool
    reason: str
    losses: list[float] = field(default_factory=list)
    live_by_domain: dict[str, float] = field(default_factory=dict)
    candidate_by_domain: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "losses"} | {
            "first_loss": self.losses[0] if self.losses else None,
            "last_loss": self.losses[-1] if self.losses else None,
        }


class DraftAdapter:
    """Re-distils a pair's draft on a :class:`TrafficBuffer` (module doc); one per served setup."""

    def __init__(
        self, pair: ModelPair, spec: AdaptationSpec, sampling: SamplingConfig, seed: int = 0
    ) -> None:
        self.pair = pair
        self.spec = spec
        self.sampling = sampling
        self.clock = DeviceClock(pair.device)
        self.rng = random.Random(f"adapt:{seed}")
        self.last_point = -1  # the request after which the last adaptation ran

    def adapt(self, live: LiveDraft, buffer: TrafficBuffer, after_request: int) -> AdaptationResult:
        """One adaptation of ``live`` on ``buffer`` (module doc); swaps the candidate in when it is better."""
        start = self.clock.now()
        entries = buffer.entries
        train = [e for e in entries if not e.request.held_back]
        held = [e for e in entries if e.request.held_back]
        new = [e for e in entries if e.request.index > self.last_point]
        self.last_point = after_request

        def result(steps: int, live_score, candidate_score, swapped: bool, reason: str, losses=()):
            return AdaptationResult(
                after_request, steps, self.clock.now() - start, len(train), len(held),
                live_score, candidate_score, swapped, reason, list(losses),
            )  # fmt: skip

        if not train or not held:
            return result(0, None, None, False, "skipped: no requests to train on or to judge by")
        self.score_with_target([e for e in entries if e.teacher is None])
        if new and self.spec.adapt_below < 1.0:
            recent = self.acceptance(live.model, new)[0]
            if recent >= self.spec.adapt_below:
                return result(
                    0, recent, None, False,
                    f"skipped: acceptance {recent:.3f} on the last {len(new)} requests >= adapt_below",
                )  # fmt: skip
        candidate = copy.deepcopy(live.model).float().train()
        losses = self._distil(candidate, train)
        candidate.eval()
        if not all(math.isfinite(loss) for loss in losses) or not _finite_weights(candidate):
            return result(
                len(losses), None, None, False, "rejected: the update is not finite (NaN/inf)", losses
            )
        candidate = candidate.to(self.pair.dtype)
        (live_score, live_domains), (candidate_score, candidate_domains) = (
            self.acceptance(live.model, held),
            self.acceptance(candidate, held),
        )
        swapped = candidate_score > live_score + self.spec.min_gain
        if swapped:
            live.swap(candidate)
        adaptation = result(
            len(losses), live_score, candidate_score, swapped,
            "swapped: better on held-back" if swapped else "rejected: not better on held-back", losses,
        )  # fmt: skip
        adaptation.live_by_domain, adaptation.candidate_by_domain = live_domains, candidate_domains
        return adaptation

    def warm_up(self, draft: torch.nn.Module) -> None:
        """One untimed training step of a throwaway copy, so the first adaptation does not pay the
        process's one-time costs (allocations, kernel selection)."""
        copy_ = copy.deepcopy(draft).float().train()
        ids = torch.zeros((self.spec.batch_size, 32), dtype=torch.long, device=self.pair.device)
        copy_(input_ids=ids, labels=ids).loss.backward()

    @torch.no_grad()
    def score_with_target(self, entries: list[Traffic]) -> None:
        """Fill ``teacher`` of entries served without the target's logits: batched target forwards."""
        for batch in _chunks(entries, self.spec.batch_size):
            _, logits = self._forward(self.pair.target, batch)
            for row, entry in enumerate(batch):
                entry.teacher = teacher_log_probs(logits[row, generated(entry)])

    def _distil(self, candidate: torch.nn.Module, train: list[Traffic]) -> list[float]:
        """At most ``steps`` AdamW steps on the generated tokens; stops at the first non-finite loss."""
        spec = self.spec
        optimizer = torch.optim.AdamW(candidate.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.0)
        losses: list[float] = []
        for _ in range(spec.steps):
            batch = [self.rng.choice(train) for _ in range(spec.batch_size)]
            ids, logits = self._forward(candidate, batch)
            rows = [(row, generated(entry)) for row, entry in enumerate(batch)]
            student = torch.cat([logits[row, span] for row, span in rows]).float()  # (N, V)
            labels = torch.cat([ids[row, span.start + 1 : span.stop + 1] for row, span in rows])  # (N,)
            teacher = torch.cat([entry.teacher for entry in batch]).to(student.device, torch.float32)
            loss = distillation_loss(student, teacher, labels, spec.temperature, spec.alpha)
            losses.append(float(loss.detach()))
            if not math.isfinite(losses[-1]):
                break
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(candidate.parameters(), 1.0)
            optimizer.step()
        return losses

    @torch.no_grad()
    def acceptance(self, draft: torch.nn.Module, entries: list[Traffic]) -> tuple[float, dict[str, float]]:
        """The acceptance speculative decoding would see for ``draft`` on the generated part of
        ``entries``, over all and per domain: greedy, argmax agreement with the teacher; sampling,
        the mean of sum_v min(p(v), q(v)). Runs the draft only."""
        sums: dict[str, list[float]] = {}
        for batch in _chunks(entries, self.spec.batch_size):
            logits = self._forward(draft, batch)[1].float()
            for row, entry in enumerate(batch):
                span = generated(entry)
                q_logits, p_log_probs = logits[row, span], entry.teacher.to(logits.device, torch.float32)
                if self.sampling.greedy:
                    accepted = float((q_logits.argmax(-1) == p_log_probs.argmax(-1)).float().sum())
                else:
                    p, q = self.sampling.probs(p_log_probs), self.sampling.probs(q_logits)
                    accepted = float(torch.minimum(p, q).sum())
                total = sums.setdefault(entry.request.domain, [0.0, 0])
                total[0] += accepted
                total[1] += span.stop - span.start
        overall = sum(a for a, _ in sums.values()) / max(1, sum(n for _, n in sums.values()))
        return overall, {domain: a / max(1, n) for domain, (a, n) in sorted(sums.items())}

    def _forward(self, model: torch.nn.Module, batch: list[Traffic]) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's token ids, right-padded (B, T), and ``model``'s logits over them (B, T, V)."""
        width = max(len(entry.token_ids) for entry in batch)
        pad = self.pair.eos_token_id if self.pair.eos_token_id is not None else 0
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, entry in enumerate(batch):
            ids[row, : len(entry.token_ids)] = torch.tensor(entry.token_ids)
            mask[row, : len(entry.token_ids)] = 1
        ids, mask = ids.to(self.pair.device), mask.to(self.pair.device)
        return ids, model(input_ids=ids, attention_mask=mask).logits[..., : self.pair.vocab_size]


def generated(entry: Traffic) -> slice:
    """The positions whose next token was generated: prompt_length - 1 .. len - 2."""
    return slice(entry.prompt_length - 1, len(entry.token_ids) - 1)


def teacher_log_probs(logits: torch.Tensor) -> torch.Tensor:
    """(N, V) target logits -> log-probabilities, float16 on the CPU (what :class:`Traffic` keeps)."""
    return logits.float().log_softmax(-1).to(torch.float16).cpu()


def _chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _finite_weights(model: torch.nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())
