"""Clairvoyant labels for batch control in the batch simulator: what knowing a step's outcome (the
one-step oracle, ``BatchReplayEnv.preview``) or the run that follows a step (a rollout on a fork,
``BatchReplayEnv.fork``) is worth. :func:`clairvoyant` is the one-step oracle as a bound;
``train_batch.py`` imitates the rollout oracle's labels (:mod:`specrl.batch_control.imitation`).
"""

from __future__ import annotations

import numpy as np

from specrl.batch_control.schedule import controller_throughput, rates_by_batch
from specrl.engine.types import Action
from specrl.envs.batch_replay import BatchReplayEnv


def rate_at(lam: dict[int, float], env: BatchReplayEnv) -> float:
    """lam[B] at the batch's size now, else over all sizes (key 0)."""
    return lam.get(len(env.active), lam[0])


class OneStepOracle:
    """Knows the next step's outcome for every k (``env.preview``); takes the k that maximises
    tokens - lam[B] * seconds, lam[B] the throughput at the batch's size B (a batch of one row
    trades time for tokens at another rate than a batch of 64)."""

    def __init__(self, env: BatchReplayEnv, lam: dict[int, float]) -> None:
        self.env, self.lam = env, lam

    def reset(self) -> None:
        pass

    def regrets(self, taus: tuple[float, ...] = (0.0,)) -> np.ndarray:
        """For every (k, tau): how much less than the best k the next step gains, in plain steps'
        worth (the gain of an action is tokens - lam[B] * seconds; the unit is lam[B] times a plain
        step's seconds). A tau never helps the oracle, which knows the outcomes, but its regret is
        what a controller that sees only the past pays or saves with a cut."""
        lam = rate_at(self.lam, self.env)
        priced = np.array(
            [[self.env.preview(k, tau) for tau in taus] for k in range(self.env.scenario.k_max + 1)]
        )  # (k, tau, [tokens, seconds])
        gains = priced[..., 0] - lam * priced[..., 1]
        return (gains.max() - gains) / (lam * priced[0, 0, 1])

    def act(self, observation) -> Action:
        return Action(int(self.regrets()[:, 0].argmin()))

    def observe(self, result) -> None:
        pass


class RolloutOracle:
    """Labels a step by the run that follows it, not by the step alone: each (k, tau) is taken on
    a fork of the episode (``env.fork``), then ``continuation`` plays up to ``horizon - 1`` more
    steps, and the action's gain is tokens - lam[B] * seconds over them (B the batch's size now;
    lam[B] the continuation's own throughput there, :func:`rates_by_batch`, measured as the gain
    counts seconds). Played to the episode's end, the tokens are the same for every action, and
    the gain orders the actions by the busy time left: the labels of one step of policy
    iteration over the continuation (AggreVaTe), on the episode's own draws. The seconds count
    prefill when the run looks past its step: a single step's prefill is that of the requests
    its finished rows make room for, which every action pays sooner or later, so over one step
    it is left out, as :class:`OneStepOracle` leaves it out (and then the two agree).

    Under load, what a step costs later outweighs what it gains now. A step that speculates
    leaves its rows at different lengths for the rest of their lives: the grid carries the holes
    of the rows that accepted less (``specrl.engine.grid``), and rows that no longer finish
    together join the batch one admission at a time, each copying the whole grid. At 64 rows,
    one step of k = 1 amid plain decoding gains more than plain over the step itself, and loses
    several plain steps' worth by the episode's end (``results/batch/labels.md``). The one-step
    oracle never sees that. ``continuation`` must act on the observation alone (a static k, a
    schedule, a policy), as every fork shares it."""

    def __init__(self, env: BatchReplayEnv, lam: dict[int, float], continuation, horizon: int) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be at least 1 step, got {horizon}")
        self.env, self.lam, self.continuation, self.horizon = env, lam, continuation, horizon
        self.prefill = horizon > 1

    def reset(self) -> None:
        pass

    def regrets(self, taus: tuple[float, ...] = (0.0,)) -> np.ndarray:
        """For every (k, tau): how much less than the best the next ``horizon`` steps gain, in
        plain steps' worth (lam[B] times a plain step's seconds now), as :meth:`OneStepOracle.regrets`."""
        lam = rate_at(self.lam, self.env)
        ks = range(self.env.scenario.k_max + 1)
        gains = np.array([[self._gain(Action(k, tau), lam) for tau in taus] for k in ks])
        return (gains.max() - gains) / (lam * self.env.preview(0)[1])

    def _gain(self, action: Action, lam: float) -> float:
        twin, gain = self.env.fork(), 0.0
        for _ in range(self.horizon):
            observation, _, done, _, info = twin.step(action)
            seconds = info["seconds"] - (0.0 if self.prefill else info["prefill_seconds"])
            gain += info["tokens"] - lam * seconds
            if done:
                break
            action = self.continuation.act(observation)
        return gain

    def act(self, observation) -> Action:
        return Action(int(self.regrets()[:, 0].argmin()))

    def observe(self, result) -> None:
        pass


def oracle_rates(env: BatchReplayEnv, controller, episodes: int, rounds: int = 3) -> dict[int, float]:
    """The one-step oracle's lam[B]: tokens per second of the steps at each batch size (key 0: over
    all), starting at ``controller``'s and refined to the oracle's own ``rounds`` times
    (Dinkelbach's iteration, per batch size). Prefill is left out: an episode admits every request
    once whatever the steps do, so its throughput is best when its tokens take the least step
    time. (With the prefill in, lam is a fifth lower at 64 rows and the oracle speculates where it
    does not pay: k = 3 had the least mean regret at B = 64, where static k = 3 runs 0.87x plain.)"""
    lam = rates_by_batch(env, controller, episodes, prefill=False)
    for _ in range(rounds):
        lam = {**lam, **rates_by_batch(env, OneStepOracle(env, lam), episodes, prefill=False)}
    return lam


def clairvoyant(env: BatchReplayEnv, controller, episodes: int) -> float:
    """The one-step oracle's throughput (tokens over busy seconds), lam[B] refined from ``controller``'s."""
    return controller_throughput(env, OneStepOracle(env, oracle_rates(env, controller, episodes)), episodes)
