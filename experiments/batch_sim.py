"""Batch-aware control in the batch simulator: the vLLM / TensorRT-LLM batch-size schedule, tuned
on validation, against plain decoding, every static k, the rules, and a learned policy, on test.

The batch simulator (``specrl/BatchReplay-v0``) replays every row's own trace with the pair's
batched latency model, measured on this machine (``specrl.latency.batch``). The schedule is
tuned the way a serving engineer tunes it: at each fixed batch size (``batch_1``, ``batch_4``,
``batch_16``, ``batch_64``), the k with the highest throughput on the **validation** traces;
between measured sizes the k of the nearer one (geometrically); 0 above the last size where a
k > 0 wins. Every controller is then run on the **test** traces of every scenario, fixed and
``serving`` (requests arriving at a rate that changes), with the same seeds, so the same
requests, arrivals and draws. Throughput: tokens of every request over the batch's busy seconds.
"Best static" is the best k on the test traces themselves, a bound in hindsight. "Clairvoyant"
knows each step's outcomes before it acts (``BatchReplayEnv.preview``) and takes the k that
maximises tokens minus lambda x seconds, lambda its own throughput at the batch's size (three
Dinkelbach rounds): not
a proof of optimality over a batch's joint future, but what per-step knowledge is worth; no
controller that sees only the past should come near it.

    python experiments/batch_sim.py                                  # results/batch/sim.{json,md}
    python experiments/batch_sim.py --policy specrl/policies/batch   # with a learned policy
    python experiments/batch_sim.py --episodes 1 --out /tmp/batch_sim   # quicker
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

import specrl
from specrl.controllers.batch_schedule import (
    BatchCutoffController,
    BatchScheduleController,
    schedule_from_best_k,
)
from specrl.envs import load_scenario
from specrl.envs.batch_replay import BatchReplayEnv, scenario_batch_latency
from specrl.evaluation.machine import origin_line, result_origin
from specrl.io import write_report
from specrl.tables import markdown_table

REPO = Path(__file__).resolve().parent.parent
FIXED = ["batch_1", "batch_4", "batch_16", "batch_64"]
SERVING = ["serving"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fixed", nargs="+", default=FIXED, help="fixed-batch scenarios (tune the schedule)")
    parser.add_argument("--serving", nargs="+", default=SERVING, help="scenarios with a varying load")
    parser.add_argument("--episodes", type=int, default=3, help="episodes (seeds 0..N-1) per controller")
    parser.add_argument("--policy", help="an exported policy folder to compare too")
    parser.add_argument("--out", default=str(REPO / "results" / "batch" / "sim"), help="output stem")
    return parser.parse_args(argv)


def throughput(env: BatchReplayEnv, controller, episodes: int) -> float:
    """Tokens over busy seconds, summed over episodes with seeds 0..episodes-1."""
    return rates_by_batch(env, controller, episodes)[0]


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

    def act(self, observation) -> specrl.Action:
        return specrl.Action(int(self.regrets()[:, 0].argmin()))

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
    of the rows that accepted less (``specrl.envs.slot_grid``), and rows that no longer finish
    together join the batch one admission at a time, each copying the whole grid. At 64 rows,
    one step of k = 1 amid plain decoding gains more than plain over the step itself, and loses
    several plain steps' worth by the episode's end (``results/batch/labels.md``, by
    ``experiments/label_horizon.py``). The one-step oracle never sees that. ``continuation``
    must act on the observation alone (a static k, a schedule, a policy), as every fork shares it."""

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
        gains = np.array([[self._gain(specrl.Action(k, tau), lam) for tau in taus] for k in ks])
        return (gains.max() - gains) / (lam * self.env.preview(0)[1])

    def _gain(self, action: specrl.Action, lam: float) -> float:
        twin, gain = self.env.fork(), 0.0
        for _ in range(self.horizon):
            observation, _, done, _, info = twin.step(action)
            seconds = info["seconds"] - (0.0 if self.prefill else info["prefill_seconds"])
            gain += info["tokens"] - lam * seconds
            if done:
                break
            action = self.continuation.act(observation)
        return gain

    def act(self, observation) -> specrl.Action:
        return specrl.Action(int(self.regrets()[:, 0].argmin()))

    def observe(self, result) -> None:
        pass


def rates_by_batch(env: BatchReplayEnv, controller, episodes: int, prefill: bool = True) -> dict[int, float]:
    """Tokens over seconds at each batch size a controller's episodes met (key 0: over all); the
    seconds of the steps alone if not ``prefill``."""
    tokens: dict[int, float] = {}
    seconds: dict[int, float] = {}
    for seed in range(episodes):
        observation, _ = env.reset(seed=seed)
        controller.reset()
        done = False
        while not done:
            observation, _, done, _, info = env.step(controller.act(observation))
            controller.observe(info["step_result"])
            spent = info["seconds"] - (0.0 if prefill else info["prefill_seconds"])
            for size in (0, info["batch_size"]):
                tokens[size] = tokens.get(size, 0.0) + info["tokens"]
                seconds[size] = seconds.get(size, 0.0) + spent
    return {size: tokens[size] / seconds[size] for size in tokens}


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
    return throughput(env, OneStepOracle(env, oracle_rates(env, controller, episodes)), episodes)


def batch_of(name: str) -> int:
    return load_scenario(name).batch.size


def tune_schedule(envs: dict[str, BatchReplayEnv], episodes: int) -> tuple[dict[int, int], dict[int, int]]:
    """The batch-size schedule as a serving engineer tunes it: at each fixed batch (scenario name
    -> its validation env), the k of the highest throughput; returns (best k by batch size, schedule)."""
    best_k = {}
    for name, env in tqdm(envs.items(), desc="tune the schedule (validation)"):
        speeds = {
            k: throughput(env, specrl.StaticController(k), episodes) for k in range(env.scenario.k_max + 1)
        }
        best_k[batch_of(name)] = max(speeds, key=speeds.get)
    return best_k, schedule_from_best_k(best_k)


def tune_cutoff(envs: dict[str, BatchReplayEnv], controller, episodes: int) -> int | None:
    """The cut-off of :class:`BatchCutoffController` for ``controller``, tuned on validation like
    the schedule: :func:`cutoff_from` its throughput over plain decoding's at each fixed batch
    (scenario name -> its validation env)."""
    plain = specrl.StaticController(0)
    return cutoff_from(
        {
            batch_of(name): throughput(env, controller, episodes) / throughput(env, plain, episodes)
            for name, env in envs.items()
        }
    )


def cutoff_from(vs_plain: dict[int, float]) -> int | None:
    """Batch size -> a controller's throughput over plain decoding's: in order of size, the first
    size where it is slower ends its speculation at the geometric middle between that size and
    the one before (1 if it is the smallest); None if it is never slower."""
    previous = None
    for size in sorted(vs_plain):
        if vs_plain[size] < 1.0:
            return math.isqrt(previous * size) if previous else 1
        previous = size
    return None


def with_cutoff(roster: dict, cutoff: int | None) -> dict:
    """``roster`` with ``ppo+cutoff``, the policy switched off above ``cutoff`` rows, if both exist."""
    if "ppo" not in roster or cutoff is None:
        return roster
    return {**roster, "ppo+cutoff": BatchCutoffController(roster["ppo"], cutoff)}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    first = load_scenario(args.fixed[0])
    pair = first.pair.load()
    latency = scenario_batch_latency(first, pair)
    ks = list(range(first.k_max + 1))
    envs = {
        (name, split): BatchReplayEnv(name, latency=latency, split=split, pair=pair)
        for name in [*args.fixed, *args.serving]
        for split in ("validation", "test")
    }
    best_k, schedule = tune_schedule({name: envs[(name, "validation")] for name in args.fixed}, args.episodes)
    controllers = {
        "plain": specrl.StaticController(0),
        "schedule": BatchScheduleController(schedule),
        "tcp": specrl.TCPController(),
        "hf-heuristic": specrl.HFHeuristicController(),
    }
    cutoff = None
    if args.policy:
        controllers["ppo"] = specrl.LearnedController.load(args.policy)
        fixed = {name: envs[(name, "validation")] for name in args.fixed}
        cutoff = tune_cutoff(fixed, controllers["ppo"], args.episodes)
        controllers = with_cutoff(controllers, cutoff)
    rows = {}
    for name in tqdm([*args.fixed, *args.serving], desc="test"):
        env = envs[(name, "test")]
        static = {k: throughput(env, specrl.StaticController(k), args.episodes) for k in ks}
        measured = {label: throughput(env, c, args.episodes) for label, c in controllers.items()}
        rows[name] = {
            "controllers": measured,
            "static": {str(k): v for k, v in static.items()},
            "best_static_k": max(static, key=static.get),
            "clairvoyant": clairvoyant(env, controllers["schedule"], args.episodes),
        }
    report = {
        "rows": rows,
        "best_k_validation": best_k,
        "schedule": schedule,
        "cutoff": cutoff,
        "episodes": args.episodes,
        "policy": args.policy,
        "latency": {"device": latency.device, "verify_scale": latency.verify_scale.tolist()},
        **result_origin(pair),
    }
    out = Path(args.out)
    write_report(out, report, markdown(report))
    print(markdown(report))
    return report


def cutoff_sentence(report: dict) -> str:
    """How ``ppo+cutoff`` was made, if the report has it."""
    if report.get("cutoff") is None:
        return ""
    return (
        f" `ppo+cutoff` is the policy with speculation off above {report['cutoff']} rows (vLLM's "
        "`speculative_disable_by_batch_size`), the cut-off tuned on validation: between the last fixed "
        "batch size where the policy beats plain decoding and the first where it does not."
    )


def markdown(report: dict) -> str:
    labels = list(next(iter(report["rows"].values()))["controllers"])
    lines = [
        "# Batch-aware control in the batch simulator (test traces)",
        "",
        f"Tokens per busy second over {report['episodes']} episodes per scenario (the same requests, "
        "arrivals and draws for every controller), modeled with this machine's batched latency model. The "
        f"schedule was tuned on validation: best k per batch size {report['best_k_validation']} -> "
        f"`{report['schedule']}` (k up to each batch size, 0 above the last).{cutoff_sentence(report)}",
        "",
    ]
    others = [label for label in labels if label != "schedule"]
    header = [
        "scenario",
        *labels,
        "best static (k)",
        "clairvoyant",
        *[f"{label} / schedule" for label in [*others, "clairvoyant"]],
    ]
    table = []
    for name, row in report["rows"].items():
        c = row["controllers"]
        best = row["static"][str(row["best_static_k"])]
        table.append(
            [
                name,
                *[f"{c[label]:.0f}" for label in labels],
                f"{best:.0f} ({row['best_static_k']})",
                f"{row['clairvoyant']:.0f}",
                *[f"{c[label] / c['schedule']:.3f}" for label in others],
                f"{row['clairvoyant'] / c['schedule']:.3f}",
            ]
        )
    lines += [markdown_table(header, table), ""]
    lines += [
        origin_line(report),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
