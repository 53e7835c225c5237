"""Measure a (target, draft) pair's latency on this device; save the latency model.

``--method loop`` (the default, what ``latency: calibrated`` uses): :func:`specrl.latency.learn`
fits the draft and verify times of the engine's own decoding loop on the pair's train prompts.
``--method profile``: :func:`specrl.latency.profile` times forwards in isolation over a grid of
context lengths (the fallback: it misses what the loop adds between forwards). ``--method
batch``: :func:`specrl.latency.measure_batch_latency`, batched forwards over batch sizes,
calibrated on continuous batching (what the batch simulator reads). ``--method serving``: no
measurement; :func:`specrl.latency.serving.fit_serving_latency` fits a serving engine's prices from
the steps it recorded (``--from-steps``: the ``steps.jsonl`` of vLLM's proposer with ``record``),
for the proposer's ``prices`` and the batch simulator. Writes ``<out>.json`` (by
default the cache file ``latency: calibrated`` reads, or its ``__profiled``/``__batch``
sibling), ``<out>.md`` (the tables and the held-out fit error) and, with ``--save-steps``, the
recorded steps to refit without measuring. Measure on a quiet machine.

    specrl calibrate                                    # default pair -> the cache
    specrl calibrate --force --steps 6000               # measure again, more steps
    specrl calibrate --method profile --out results/latency/small-cpu-profiled.json
    specrl calibrate --preset tiny --steps 400 --out /tmp/t.json       # smoke
    specrl calibrate --method serving --from-steps rec/steps.jsonl --out vllm-prices.json  # vLLM's
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from specrl.cli.pair_options import add_pair_arguments, check_pair_arguments, pair_values
from specrl.names import CALIBRATION_METHODS

HELP = "measure a pair's latency model on this machine (cached)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_pair_arguments(parser)
    parser.add_argument(
        "--method",
        choices=(*CALIBRATION_METHODS, "serving"),
        default="loop",
        help="loop: learn from the decoding loop (default); profile: forwards alone; batch: over batch "
        "sizes; serving: fit the steps a serving engine recorded (--from-steps, --out)",
    )
    parser.add_argument("--k-max", type=int, default=8, help="largest k to model (default 8)")
    parser.add_argument("--steps", type=int, default=3000, help="loop: timed steps (default 3000)")
    parser.add_argument(
        "--save-steps", action="store_true", help="loop: also write the steps (<out>.steps.json)"
    )
    parser.add_argument(
        "--from-steps",
        type=Path,
        nargs="+",
        help="loop: refit steps saved by --save-steps; serving: the steps.jsonl files vLLM's proposer "
        "recorded (fitted together)",
    )
    parser.add_argument(
        "--serving-name",
        default="serving",
        help="serving: the name the prices record as their machine (default serving), e.g. vllm-cpu",
    )
    parser.add_argument("--repeats", type=int, help="profile: timed passes, median per cell (default 5)")
    parser.add_argument(
        "--contexts", type=int, nargs="+", metavar="N", help="profile: context lengths (default: 16, 32, ...)"
    )
    parser.add_argument(
        "--out", type=Path, help="JSON file to write (default: the cache file `latency: calibrated` reads)"
    )
    parser.add_argument("--force", action="store_true", help="measure even if the output file exists")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    check_pair_arguments(args, parser)
    if args.method == "serving":
        return fit_served(args, parser)
    if args.method == "loop" and (args.repeats is not None or args.contexts is not None):
        parser.error("--repeats and --contexts set up the isolated profile: add --method profile")
    args.repeats = 5 if args.repeats is None else args.repeats
    if args.k_max < 1 or args.repeats < 1 or args.steps < 1:
        parser.error("--k-max, --repeats and --steps must be >= 1")
    if args.method != "loop" and (args.save_steps or args.from_steps):
        parser.error("--save-steps and --from-steps go with --method loop")
    if args.from_steps is not None:
        if len(args.from_steps) > 1:
            parser.error("--method loop refits one file of steps: give one --from-steps")
        args.from_steps = args.from_steps[0]
        if not args.from_steps.is_file():
            parser.error(f"--from-steps {args.from_steps}: no such file (write one with --save-steps)")
    import specrl
    from specrl.io import write_text_atomic
    from specrl.latency import cached_calibration, calibrated, latency_path

    pair = specrl.load_pair(**pair_values(args))
    path = args.out or latency_path(pair, args.method)
    model = None if args.force else cached_calibration(pair, k_max=args.k_max, method=args.method, path=path)
    if model is not None:
        print(f"{path} exists; reporting it (--force measures again)")
    else:
        started = time.perf_counter()
        options = measure_options(pair, args, path)
        model = calibrated(pair, k_max=args.k_max, recalibrate=True, method=args.method, path=path, **options)
        print(f"measured and fitted in {time.perf_counter() - started:.0f} s")
    markdown = model.to_markdown()
    write_text_atomic(path.with_suffix(".md"), markdown)
    print(markdown)
    print(f"wrote {path} and {path.with_suffix('.md')}")
    return 0


def fit_served(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``--method serving``: the serving engine's prices fitted from the steps it recorded, with
    the held-out error; nothing is measured and no model is loaded."""
    if args.from_steps is None or args.out is None:
        parser.error(
            "--method serving fits recorded steps: give --from-steps (the steps.jsonl vLLM's proposer "
            'writes with additional_config {"specrl": {"record": FOLDER}}) and --out FILE.json'
        )
    missing = [str(path) for path in args.from_steps if not path.is_file()]
    if missing:
        parser.error(f"--from-steps {' '.join(missing)}: no such file")
    from specrl.envs.scenario import PairSpec
    from specrl.io import write_text_atomic
    from specrl.latency import LatencyError
    from specrl.latency.serving import fit_serving_latency, read_served_steps

    spec = PairSpec(**{k: v for k, v in pair_values(args).items() if k in ("preset", "target", "draft")})
    try:
        steps = [step for path in args.from_steps for step in read_served_steps(path)]
        model = fit_serving_latency(steps, pair=spec.info().name, device=args.serving_name, k_max=args.k_max)
    except LatencyError as error:
        parser.error(str(error))
    model.save(args.out)
    markdown = model.to_markdown()
    write_text_atomic(args.out.with_suffix(".md"), markdown)
    print(markdown)
    print(f"fitted {len(steps)} steps; wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


def measure_options(pair, args: argparse.Namespace, path: Path) -> dict:
    """:func:`~specrl.latency.calibrated`'s options for ``args.method``: the profile's grid, the
    batch model's prompts (the arrivals scenario's), or the loop's steps (a count to record, or
    records read back or recorded now to save beside ``path``)."""
    from specrl.envs import load_scenario
    from specrl.envs.scenario.sources import scenario_calibration_prompts
    from specrl.io import write_text_atomic
    from specrl.latency import StepRecords, record_loop

    if args.method == "profile":
        return {"contexts": args.contexts, "repeats": args.repeats}
    if args.method == "batch":
        return {"prompts": scenario_calibration_prompts(load_scenario("arrivals"), pair)}
    if args.from_steps is not None:
        records = StepRecords.from_dict(json.loads(args.from_steps.read_text()))
        print(f"refitting {len(records)} steps from {args.from_steps}")
        return {"records": records}
    if not args.save_steps:
        return {"steps": args.steps}
    records = record_loop(pair, k_max=args.k_max, steps=args.steps)
    steps_path = path.with_name(path.stem + ".steps.json")
    write_text_atomic(steps_path, json.dumps(records.to_dict()))
    print(f"wrote the recorded steps to {steps_path}")
    return {"records": records}
