"""The requests of a stream, in arrival order: each one's segment, domain, prompt and seed."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from specrl.embedded.corpus import SPLITS
from specrl.serving.stream_file import StreamError, StreamSpec


@dataclass(frozen=True)
class Request:
    """One request of the stream.

    Attributes:
        index: position in the stream, from 0.
        segment: the name of the segment it belongs to.
        domain: the domain its prompt comes from.
        prompt: the prompt text.
        seed: the sampling seed of its generation (the same for every setup served).
        held_back: never used to train a draft; adaptations are judged on these. Evenly spaced (a
            share ``adaptation.holdout`` of every stretch of the stream, with a seeded phase), so
            the held-back slice of recent traffic always has requests of a domain that just arrived.
    """

    index: int
    segment: str
    domain: str
    prompt: str
    seed: int
    held_back: bool


def draw_requests(spec: StreamSpec, prompts: Mapping[str, Mapping[str, list[str]]]) -> list[Request]:
    """The stream's requests: each segment's domain counts in a seeded random order, each domain's
    prompts of ``spec.split`` taken in a seeded random order without repetition.

    Args:
        spec: the stream.
        prompts: split -> domain -> prompt texts (a pair's ``prompts``).

    Raises:
        StreamError: a domain the split has no prompts of, or more requests of a domain than it has
            prompts.
    """
    rng = random.Random(f"stream:{spec.seed}")
    holdout, phase = spec.adaptation.holdout, rng.random()
    available = prompts.get(spec.split, {})
    needed: dict[str, int] = {}
    for segment in spec.segments:
        for domain, count in segment.requests.items():
            needed[domain] = needed.get(domain, 0) + count
    pools = {}
    for domain, count in needed.items():
        texts = list(available.get(domain, []))
        if count > len(texts):
            raise StreamError(
                f"{spec.source or spec.name}: the stream asks for {count} '{domain}' requests but the "
                f"'{spec.split}' split has {len(texts)} '{domain}' prompts (splits and domains: "
                f"{ {s: sorted(d) for s, d in prompts.items() if s in SPLITS} }); lower the "
                "counts, or use another split or domain"
            )
        rng.shuffle(texts)
        pools[domain] = texts
    requests = []
    for segment in spec.segments:
        order = [domain for domain, count in segment.requests.items() for _ in range(count)]
        rng.shuffle(order)
        for domain in order:
            requests.append(
                Request(
                    index=len(requests),
                    segment=segment.name,
                    domain=domain,
                    prompt=pools[domain].pop(),
                    seed=rng.randrange(2**31),
                    held_back=int((len(requests) + 1) * holdout + phase)
                    > int(len(requests) * holdout + phase),
                )
            )
    return requests
