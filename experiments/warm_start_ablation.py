"""What each part of the training gives: PPO from scratch, the warm start alone, warm start + PPO.

Runs ``experiments/train_ppo.py`` on its default scenarios once per arm and seed (no real-loop
check; every run reports on the same test traces in the simulator):

- ``warm start``: ``--total-timesteps 0`` (the rules cloned, no PPO);
- ``warm start + PPO``: the default run;
- ``scratch``: ``--no-warm-start`` (a random policy, then PPO, the checkpoint chosen on validation).

Each run's ``metadata.json`` and ``results.md`` are kept under ``<out>/<arm>/seed<N>/``; a run
already there is not run again (an interrupted ablation resumes). Then, per scenario and arm, the
median and range over seeds of the policy's ratio to the best rule on test traces (the best of
TCP, the HF heuristic, AdaEDL, the SpecDec++-style rule and the best static setting in hindsight)
and the validation score the checkpoint was kept by: ``<out>/ablation.{json,md,png}``.

    python experiments/warm_start_ablation.py --seeds 0 1 2 --out results/warm_start
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

from specrl.io import write_text_atomic
from specrl.plots import bar_groups
from specrl.tables import markdown_table
from specrl.training import comparison_ratios
from specrl.training.kept_runs import kept_run, page_footer

REPO = Path(__file__).resolve().parent.parent
ARMS = {
    "warm start": ["--total-timesteps", "0"],
    "warm start + PPO": [],
    "scratch": ["--no-warm-start"],
}


def run_arm(arm: str, seed: int, out: Path, extra: list[str]) -> dict:
    """The arm's run for ``seed`` (run now unless its metadata is already kept), as its metadata."""
    kept = out / arm.replace(" ", "_").replace("+", "plus") / f"seed{seed}"
    kept_run(arm, seed, kept, [*ARMS[arm], *extra], ("metadata.json", "results.md"))
    return json.loads((kept / "metadata.json").read_text())


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=REPO / "results" / "warm_start")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: passed to every train_ppo.py run")
    args = parser.parse_args()
    extra = [a for a in args.extra if a != "--"]
    started = time.perf_counter()
    runs: dict[str, dict[int, dict]] = {arm: {} for arm in args.arms}
    for seed in args.seeds:  # seed by seed: an interrupted ablation has every arm of its first seeds
        for arm in args.arms:
            runs[arm][seed] = run_arm(arm, seed, args.out, extra)

    first = next(iter(next(iter(runs.values())).values()))
    scenarios = list(first["evaluation"]["sim_test_tokens_per_s"])
    ratios = {
        arm: {
            name: [
                comparison_ratios(m["evaluation"]["sim_test_tokens_per_s"][name])["best rule"]
                for m in seeds.values()
            ]
            for name in scenarios
        }
        for arm, seeds in runs.items()
    }
    kept = {
        arm: [
            {
                "seed": seed,
                "timesteps": m["evaluation"]["selected_on_validation"]["timesteps"],
                "worst_ratio_vs_best_rule": m["evaluation"]["selected_on_validation"][
                    "worst_ratio_vs_best_rule"
                ],
            }
            for seed, m in seeds.items()
        ]
        for arm, seeds in runs.items()
    }
    table = markdown_table(
        ["scenario", *(f"{arm}: policy / best rule" for arm in runs)],
        [[name, *(spread(ratios[arm][name]) for arm in runs)] for name in scenarios],
    )
    selection = markdown_table(
        ["arm", "checkpoint kept (step) per seed", "its worst validation ratio to the best rule per seed"],
        [
            [
                arm,
                ", ".join(f"{k['timesteps']:,}" for k in rows),
                ", ".join(f"{k['worst_ratio_vs_best_rule']:.3f}" for k in rows),
            ]
            for arm, rows in kept.items()
        ],
    )
    command = "python " + shlex.join(sys.argv)
    text = (
        "# Warm start ablation: PPO from scratch, the warm start alone, warm start + PPO\n\n"
        f"Simulator, test traces; each cell: the median over seeds {args.seeds} of the policy's tokens/s "
        "over the best rule's (the best of TCP, the HF heuristic, AdaEDL, the SpecDec++-style rule and "
        "the best static setting in hindsight, on the same draws), [min, max] over seeds.\n\n"
        f"{table}\n\nCheckpoint selection on validation traces:\n\n{selection}\n\n"
        f"{page_footer(command, started)}"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "ablation.md", text)
    write_text_atomic(
        args.out / "ablation.json",
        json.dumps(
            {"command": command, "seeds": args.seeds, "ratio_vs_best_rule": ratios, "kept": kept}, indent=2
        ),
    )
    bar_groups(
        args.out / "ablation.png",
        scenarios,
        {arm: [statistics.median(ratios[arm][name]) for name in scenarios] for arm in runs},
        "policy / best rule (median over seeds)",
        "Test traces, simulator: what the warm start and PPO each give",
        reference=1.0,
    )
    print(text)


if __name__ == "__main__":
    main()
