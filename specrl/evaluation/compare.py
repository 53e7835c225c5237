"""The one real-loop comparison loop: every player (a controller in an env, or HF ``generate``)
on every episode, repeated, each player of an episode on the same random draws (the same reset
seed), in an order that spreads the machine's slow and fast phases over all alike. Each caller
keeps its protocol by choosing the order (:func:`shuffled`, :func:`alternating`, :func:`fixed`),
the seeds (:func:`episode_seed_of`, :func:`repeat_seed`, :func:`unseeded`) and the warm-up.
:func:`paired_ratio` compares two players within each repeat, so drift between repeats cancels
(its 95% interval: :mod:`specrl.evaluation.intervals`).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

R = TypeVar("R")
#: Plays one episode with the given reset seed and returns what it measured.
Player = Callable[[Any, int], R]
#: The players' run order for one episode: (names, repeat, episode index) -> names.
Order = Callable[[list[str], int, int], list[str]]
#: The reset seed of an episode in a repeat: (episode, repeat, episode index) -> seed.
SeedRule = Callable[[Any, int, int], int]


@dataclass(frozen=True)
class Trial(Generic[R]):
    """One played episode: who, which repeat, which episode (index into the plan), its seed and
    what the player returned."""

    player: str
    repeat: int
    episode: int
    seed: int
    record: R


def shuffled(seed: int) -> Order:
    """A fresh random order for every episode, from ``random.Random(seed)``."""
    rng = random.Random(seed)
    return lambda names, repeat, index: rng.sample(names, len(names))


def fixed(names: list[str], repeat: int, index: int) -> list[str]:
    """The players in the order given, on every episode."""
    return list(names)


def alternating(names: list[str], repeat: int, index: int) -> list[str]:
    """The players in the order given on even repeats and backwards on odd ones, so a drift of the
    machine's speed within a repeat favours none."""
    return list(names) if repeat % 2 == 0 else names[::-1]


def episode_seed_of(episode: Any, repeat: int, index: int) -> int:
    """The episode's own ``seed``, the same in every repeat."""
    return episode.seed


def repeat_seed(episode: Any, repeat: int, index: int) -> int:
    """The repeat's number: every player of a repeat on the same draws, new draws each repeat."""
    return repeat


def unseeded(episode: Any, repeat: int, index: int) -> int:
    """0 for every episode: for players that draw nothing (greedy decoding)."""
    return 0


def compare(
    players: Mapping[str, Player[R]],
    episodes: Sequence[Any],
    repeats: int = 1,
    *,
    order: Order = fixed,
    seed: SeedRule = episode_seed_of,
    warmup: int = 0,
    warmup_players: Sequence[str] | None = None,
    warmup_episode: Any = None,
    on_trial: Callable[[Trial[R] | None], None] | None = None,
) -> list[Trial[R]]:
    """Play every player on every episode, ``repeats`` times; return the timed trials in run order.

    First ``warmup`` untimed passes of ``warmup_players`` (default: all) over ``warmup_episode``
    (default: the first episode); then, per repeat and episode, every player in ``order``'s
    order on ``seed``'s seed. ``on_trial`` is called after every episode (None for a warm-up one).
    """
    names = list(players)
    for _ in range(warmup):
        warm = episodes[0] if warmup_episode is None else warmup_episode
        for name in names if warmup_players is None else warmup_players:
            players[name](warm, seed(warm, 0, 0))
            if on_trial is not None:
                on_trial(None)
    trials: list[Trial[R]] = []
    for repeat in range(repeats):
        for index, episode in enumerate(episodes):
            episode_seed = seed(episode, repeat, index)
            for name in order(names, repeat, index):
                trial = Trial(name, repeat, index, episode_seed, players[name](episode, episode_seed))
                trials.append(trial)
                if on_trial is not None:
                    on_trial(trial)
    return trials


def by_player(trials: Sequence[Trial[R]], players: Sequence[str]) -> dict[str, list[list[R]]]:
    """Records as ``result[player][repeat][episode]`` (episodes in plan order)."""
    repeats = 1 + max((t.repeat for t in trials), default=-1)
    result: dict[str, list[list[Any]]] = {name: [[] for _ in range(repeats)] for name in players}
    for trial in sorted(trials, key=lambda t: (t.repeat, t.episode)):
        result[trial.player][trial.repeat].append(trial.record)
    return result


def paired_ratio(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """The median over repeats of ours / theirs within the same repeat."""
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


def paired_ratios(per_repeat: Mapping[str, Sequence[float]], ours: str) -> dict[str, float]:
    """``ours``'s :func:`paired_ratio` to every player (itself included: 1)."""
    return {name: paired_ratio(per_repeat[ours], values) for name, values in per_repeat.items()}
