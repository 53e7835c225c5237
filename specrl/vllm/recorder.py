"""Recording inside vLLM: what the proposer served, as it served it (``additional_config
{"specrl": {"record": FOLDER, "record_rate": 0.1}}``).

Two JSON-lines files in ``FOLDER``, appended as vLLM serves (each line is complete when written;
a run cut short loses at most its last line):

- ``steps.jsonl``: one :class:`~specrl.latency.serving.ServedStep` per engine step, every step:
  what the step cost, at what batch size and tokens verified (the serving engine's prices,
  :func:`~specrl.latency.serving.fit_serving_latency`).
- ``requests.jsonl``: per recorded request (a share ``record_rate`` of them, drawn per request with
  a seeded generator) and step: its number, the proposer's call, the batch's rows, the drafter, k
  and tau of the action, the tokens drafted and their confidences and entropies, whether the cut
  stopped the draft, the count vLLM accepted, the tokens it emitted and the step's seconds. A
  request's first line also holds its prompt's token ids, so its prompt plus everything it
  emitted is its whole output (:func:`read_requests`).

The files are per process: with several vLLM processes, give each its own folder.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from specrl.io import json_lines
from specrl.latency.serving import ServedStep

STEPS_FILE = "steps.jsonl"
REQUESTS_FILE = "requests.jsonl"


@dataclasses.dataclass
class StepTally:
    """One engine step's counts, gathered row by row as the proposer meets them."""

    rows: int = 0
    verified: int = 0
    context: int = 0
    prefill_rows: int = 0
    prefill_tokens: int = 0

    def decoded(self, proposed: int, context: int) -> None:
        """A row that was verified: ``proposed`` drafted tokens after ``context`` tokens."""
        self.rows += 1
        self.verified += 1 + proposed
        self.context += context

    def admitted(self, prompt: int) -> None:
        """A request that first decodes: its prompt was prefilled in the step (its context counts
        there, not in :attr:`context`)."""
        self.rows += 1
        self.verified += 1
        self.prefill_rows += 1
        self.prefill_tokens += prompt

    def prefilling(self) -> None:
        """A row still prefilling (a chunk of its prompt ran in the step)."""
        self.prefill_rows += 1


@dataclasses.dataclass(frozen=True)
class CallCost:
    """What one propose call spent (a :class:`ServedStep` reports the call before its step)."""

    draft_rows: int = 0
    drafted: int = 0
    draft_forwards: int = 0
    draft_seconds: float = 0.0
    propose_seconds: float = 0.0


class ServingRecorder:
    """Appends the proposer's steps and the steps of a sampled share of its requests."""

    def __init__(self, folder: str | Path, rate: float = 1.0, seed: int = 0) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.rate = rate
        self.previous = CallCost()  # the last call's cost, reported with the next step
        self._draw = np.random.default_rng(seed)
        self._steps = open(self.folder / STEPS_FILE, "a", buffering=1)  # noqa: SIM115 (open while serving)
        self._requests = open(self.folder / REQUESTS_FILE, "a", buffering=1)  # noqa: SIM115

    def chooses(self) -> bool:
        """Whether a new request is recorded (a draw at ``rate``)."""
        return self.rate >= 1 or bool(self._draw.random() < self.rate)

    def step(self, tally: StepTally, seconds: float) -> None:
        """The step just verified: ``tally``'s counts, ``seconds`` of vLLM's, the last call's cost."""
        step = ServedStep(**dataclasses.asdict(tally), seconds=seconds, **dataclasses.asdict(self.previous))
        self._steps.write(json.dumps(dataclasses.asdict(step)) + "\n")

    def request_step(self, record: dict[str, Any]) -> None:
        self._requests.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self._steps.close()
        self._requests.close()


@dataclasses.dataclass
class RecordedRequest:
    """One recorded request: its prompt, and per step what was drafted and what vLLM accepted."""

    number: int
    prompt: list[int]
    steps: list[dict[str, Any]]

    @property
    def output(self) -> list[int]:
        """Every token vLLM's steps emitted for it while recorded, the prefill's first included.
        The last step's may run past the request's budget or its EOS (vLLM verifies the whole
        draft; its output then drops them)."""
        return [token for step in self.steps for token in step["emitted"]]


def read_requests(folder: str | Path) -> list[RecordedRequest]:
    """The recorded requests of ``folder``'s ``requests.jsonl``, in order of arrival; a last line
    cut short (a run stopped while writing) is left out."""
    path = Path(folder) / REQUESTS_FILE
    requests: dict[int, RecordedRequest] = {}
    for number, record in json_lines(path):
        request = requests.get(record["request"])
        if request is None:
            if "prompt" not in record:
                raise ValueError(
                    f"{path}, line {number}: request {record['request']}'s first line has no prompt"
                )
            request = requests[record["request"]] = RecordedRequest(record["request"], record["prompt"], [])
        request.steps.append(record)
    return sorted(requests.values(), key=lambda r: r.number)
