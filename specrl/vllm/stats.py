"""What the proposer does, made visible: per request row and step, the k it chose, its drafter,
speculation turned off (by the batch schedule or cut-off) and requests that fell back to no
speculation after an error; per draft length, the drafts vLLM verified and the tokens it accepted
of them (acceptance per position undercounts once k varies: a position past a short draft counts
nothing, and short drafts are chosen where acceptance is low).

Three ways to read it: :class:`ProposerStats` (counts, in the proposer's process); a log line
every :data:`LOG_INTERVAL` seconds while it serves (vLLM logs its own speculative metrics as
often); and Prometheus metrics under ``specrl:spec_decode_*`` beside vLLM's ``vllm:spec_decode_*``
(in the proposer's process: ``vllm serve`` shows them on ``/metrics`` when its engine shares the
server's registry, e.g. with ``PROMETHEUS_MULTIPROC_DIR`` set, as vLLM documents for multiple
processes).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from functools import cache
from typing import Any

logger = logging.getLogger("specrl.vllm.proposer")

LOG_INTERVAL = 10.0  # seconds between two log lines while serving
PREFIX = "specrl:spec_decode_"
K_BUCKETS = 16  # the chosen-k histogram's buckets: 0, 1, ..., 15 and more


@cache
def _metrics() -> dict[str, Any] | None:
    """The Prometheus metrics, made once per process (None without ``prometheus_client``)."""
    try:
        from prometheus_client import Counter as PromCounter
        from prometheus_client import Histogram
    except ImportError:
        return None
    return {
        "k": Histogram(
            f"{PREFIX}chosen_k",
            "Tokens the specrl controller chose to draft, per request and step.",
            buckets=[k + 0.5 for k in range(K_BUCKETS)],
        ),
        "drafter": PromCounter(
            f"{PREFIX}drafter_rows",
            "Request steps the specrl controller drafted for, by drafter.",
            ["drafter"],
        ),
        "off": PromCounter(
            f"{PREFIX}off_rows", "Request steps without speculation by the batch schedule or cut-off."
        ),
        "fallbacks": PromCounter(
            f"{PREFIX}fallbacks", "Requests that fell back to no speculation after an error in the proposer."
        ),
        "drafts": PromCounter(
            f"{PREFIX}num_drafts", "Drafts vLLM verified, by their length in tokens.", ["draft_length"]
        ),
        "accepted": PromCounter(
            f"{PREFIX}num_accepted_tokens",
            "Draft tokens vLLM accepted, by the length of the draft they were in.",
            ["draft_length"],
        ),
    }


class ProposerStats:
    """Counts since the proposer started (see the module doc)."""

    def __init__(self, controller: str, log_interval: float = LOG_INTERVAL) -> None:
        self.controller, self.log_interval = controller, log_interval
        self.rows = 0  # request steps the controller was asked about, or would have been
        self.k = Counter()  # chosen k -> request steps
        self.drafters = Counter()  # drafter -> request steps that drafted with it (k > 0)
        self.off = 0  # request steps the schedule or cut-off left without speculation
        self.fallbacks = 0  # requests turned off after an error
        self.drafts = Counter()  # draft length -> drafts of that length vLLM verified
        self.accepted = Counter()  # draft length -> tokens accepted of those drafts
        self._metrics = _metrics()
        self._logged_at = time.monotonic()
        self._logged_rows = 0

    def chose(self, k: int, drafter: str) -> None:
        self.rows += 1
        self.k[k] += 1
        if k:
            self.drafters[drafter] += 1
        if self._metrics:
            self._metrics["k"].observe(k)
            if k:
                self._metrics["drafter"].labels(drafter=drafter).inc()

    def switched_off(self) -> None:
        self.rows += 1
        self.off += 1
        self.k[0] += 1
        if self._metrics:
            self._metrics["off"].inc()
            self._metrics["k"].observe(0)

    def failed(self, requests: int) -> None:
        self.fallbacks += requests
        if self._metrics:
            self._metrics["fallbacks"].inc(requests)

    def verified(self, length: int, accepted: int) -> None:
        """vLLM verified a request's draft of ``length`` tokens and accepted ``accepted`` of them."""
        if not length:
            return
        self.drafts[length] += 1
        self.accepted[length] += accepted
        if self._metrics:
            self._metrics["drafts"].labels(draft_length=str(length)).inc()
            self._metrics["accepted"].labels(draft_length=str(length)).inc(accepted)

    def acceptance_by_length(self) -> dict[int, float]:
        """Per draft length: the share of its tokens vLLM accepted."""
        return {m: self.accepted[m] / (m * n) for m, n in sorted(self.drafts.items())}

    def summary(self) -> dict[str, Any]:
        """Mean k, the share of request steps at k = 0, turned off, and per drafter; acceptance
        per draft length."""
        rows = max(self.rows, 1)
        return {
            "rows": self.rows,
            "mean_k": sum(k * n for k, n in self.k.items()) / rows,
            "k0_share": self.k[0] / rows,
            "off_share": self.off / rows,
            "drafter_share": {name: n / rows for name, n in sorted(self.drafters.items())},
            "fallbacks": self.fallbacks,
            "drafts_by_length": dict(sorted(self.drafts.items())),
            "acceptance_by_length": self.acceptance_by_length(),
        }

    def maybe_log(self) -> None:
        """A log line when :attr:`log_interval` has passed with new request steps since the last."""
        now = time.monotonic()
        if now - self._logged_at < self.log_interval or self.rows == self._logged_rows:
            return
        self._logged_at, self._logged_rows = now, self.rows
        s = self.summary()
        drafters = ", ".join(f"{name} {share:.0%}" for name, share in s["drafter_share"].items()) or "none"
        logger.info(
            "specrl proposer (%s): %d request steps, mean k %.2f, k = 0 %.0f%% (off by batch size %.0f%%), "
            "drafted with %s, fallbacks %d",
            self.controller,
            s["rows"],
            s["mean_k"],
            100 * s["k0_share"],
            100 * s["off_share"],
            drafters,
            s["fallbacks"],
        )
