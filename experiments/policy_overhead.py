"""Decision overhead of an exported policy: microseconds per (k, tau) choice, and its share of an iteration.

Two measurements, one run:

1. In a real decode. The pair decodes test prompts speculatively with the policy as the
   controller; every ``act`` call is timed where it happens (between two iterations), and so is
   every call of the per-token stop rule the engine makes inside the draft loop (policies with
   the stop dimension); the mean iteration time is the decode's draft + verify seconds
   (device-synchronised) per step.
2. Alone. ``act`` is called ``--calls`` times on the observations the decode produced, after
   ``--warmup`` untimed calls; the median is the cost of one decision without cache effects of
   the models in between.

For a policy over a drafter pool that offers the n-gram lookup, the lookup features
(a lookup over the text before each decision, :meth:`Generation.lookup_match`) are timed too
and counted in the decision: it is work the policy makes the loop do.

The share of an iteration is the median, over iterations, of the step decision plus that
step's stop-rule calls (plus its lookup feature), over the mean iteration time.
Writes JSON (``--json``) and a markdown table (``--markdown``) and prints the table.

Run from the repository root:

    python experiments/policy_overhead.py specrl/policies/default                       # default pair
    python experiments/policy_overhead.py specrl/policies/default --preset tiny --prompts 1 \\
        --max-new-tokens 32 --calls 2000                                           # smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from typing import Any

import numpy as np

import specrl
from specrl.controllers import LearnedController
from specrl.engine.generation import Generation
from specrl.engine.types import Action, StepResult, StopRule
from specrl.export import PolicyError
from specrl.io import write_text_atomic
from specrl.tables import markdown_table

FALLBACK_PROMPT = "def fib(n):"  # for pairs without embedded prompt sets (hub pairs)


class TimedRule:
    """Delegates to a per-token stop rule and adds the time of each call to the current step's."""

    def __init__(self, rule: StopRule, stop_ns: list[int]) -> None:
        self.rule, self.stop_ns = rule, stop_ns

    def __call__(self, position: int, confidence: float, entropy: float) -> bool:
        start = time.perf_counter_ns()
        stop = self.rule(position, confidence, entropy)
        self.stop_ns[-1] += time.perf_counter_ns() - start
        return stop


class TimedController:
    """Delegates to a controller and records how long each ``act`` took, what it saw, and how
    long the per-token stop calls of each step took (the engine makes them inside the draft loop)."""

    def __init__(self, controller: LearnedController) -> None:
        self.controller = controller
        self.act_ns: list[int] = []
        self.stop_ns: list[int] = []
        self.lookup_ns: list[int] = []  # the lookup feature before each decision (pool policies)
        self.observations: list[np.ndarray] = []
        self._timed: dict[int, Action] = {}  # id of the policy's action -> the same action, timed
        self.drafters = controller.drafters  # the decoder builds the features of these drafters

    def reset(self) -> None:
        self.controller.reset()

    def act(self, observation: Any) -> Action:
        start = time.perf_counter_ns()
        action = self.controller.act(observation)
        self.act_ns.append(time.perf_counter_ns() - start)
        self.stop_ns.append(0)
        self.observations.append(np.array(observation, dtype=np.float32))
        if action.stop is None:
            return action
        timed = self._timed.get(id(action))
        if timed is None:  # the policy's actions are a fixed table: wrap each once
            timed = self._timed[id(action)] = Action(
                action.k, action.tau, TimedRule(action.stop, self.stop_ns), drafter=action.drafter
            )
        return timed

    def observe(self, result: StepResult) -> None:
        self.controller.observe(result)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("policy", help="exported policy folder (policies/<name>)")
    parser.add_argument("--preset", default="small", help="embedded pair to decode with (small, tiny)")
    parser.add_argument(
        "--target", help="target model: HF id or local path (with --draft), instead of --preset"
    )
    parser.add_argument("--draft", help="draft model: HF id or local path (with --target)")
    parser.add_argument(
        "--device", help="device of the models (default: cuda if present); the policy runs on CPU"
    )
    parser.add_argument("--prompts", type=int, default=2, help="test prompts per domain to decode")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens per generation")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    parser.add_argument(
        "--calls", type=int, default=20000, help="timed act calls in the isolated measurement"
    )
    parser.add_argument("--warmup", type=int, default=1000, help="untimed act calls before timing")
    parser.add_argument("--json", dest="json_path", help="write the results as JSON here")
    parser.add_argument("--markdown", help="write the markdown table here")
    return parser.parse_args(argv)


def held_out_prompts(pair: specrl.ModelPair, per_domain: int) -> list[str]:
    """The first ``per_domain`` test prompts of every domain, or one fixed prompt."""
    test = pair.prompts.get("test", {})
    prompts = [prompt for domain in sorted(test) for prompt in test[domain][:per_domain]]
    return prompts or [FALLBACK_PROMPT]


def timed_lookups(timed: TimedController) -> None:
    """Time every lookup the decoder's features make (``Generation.lookup_match``)."""
    untimed = Generation.lookup_match

    def lookup_match(generation: Generation) -> tuple[int, int]:
        start = time.perf_counter_ns()
        match = untimed(generation)
        timed.lookup_ns.append(time.perf_counter_ns() - start)
        return match

    Generation.lookup_match = lookup_match


def decode(pair: specrl.ModelPair, timed: TimedController, args: argparse.Namespace) -> dict[str, float]:
    """Decode the prompts with the timed policy (one untimed warm-up generation first)."""
    decoder = specrl.SpeculativeDecoder(pair, timed)
    prompts = held_out_prompts(pair, args.prompts)
    options = {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature}
    decoder.generate(prompts[0], **options)  # warm-up: allocator, kernels, the exported program
    timed.act_ns.clear()
    timed.stop_ns.clear()
    timed.lookup_ns.clear()
    timed.observations.clear()
    steps = tokens = 0
    decode_seconds = 0.0
    for seed, prompt in enumerate(prompts):
        stats = decoder.generate(prompt, seed=seed, **options).stats
        steps += stats.steps
        tokens += stats.new_tokens
        decode_seconds += stats.decode_seconds
    return {
        "generations": len(prompts),
        "steps": steps,
        "tokens": tokens,
        "mean_iteration_ms": 1e3 * decode_seconds / max(1, steps),
        "decode_tokens_per_s": tokens / decode_seconds if decode_seconds > 0 else 0.0,
    }


def time_alone(
    controller: LearnedController, observations: list[np.ndarray], calls: int, warmup: int
) -> np.ndarray:
    """Nanoseconds of each of ``calls`` act calls, cycling through ``observations``, after a warm-up."""
    for i in range(warmup):
        controller.act(observations[i % len(observations)])
    elapsed = np.empty(calls, dtype=np.int64)
    for i in range(calls):
        observation = observations[i % len(observations)]
        start = time.perf_counter_ns()
        controller.act(observation)
        elapsed[i] = time.perf_counter_ns() - start
    return elapsed


def markdown(result: dict[str, Any]) -> str:
    rows = [
        ("policy", f"`{result['policy']}` (trained on {result['policy_pair']})"),
        ("pair", f"{result['pair']} on {result['device']}"),
        (
            "decision alone, median / p90",
            f"{result['alone_us_median']:.1f} / {result['alone_us_p90']:.1f} µs",
        ),
        (
            "step decision in decode, median",
            f"{result['in_decode_us_median']:.1f} µs ({result['steps']} decisions)",
        ),
        (
            "per-token stop calls of a step, median / mean",
            f"{result['stop_us_median']:.1f} / {result['stop_us_mean']:.1f} µs",
        ),
        ("lookup feature of a step, median", f"{result['lookup_us_median']:.1f} µs"),
        ("all of it, median per iteration", f"{result['decision_us_median']:.1f} µs"),
        ("mean iteration (draft + verify)", f"{result['mean_iteration_ms']:.3f} ms"),
        ("decision / iteration", f"{100 * result['share_of_iteration']:.2f} %"),
    ]
    lines = ["# Policy decision overhead", "", markdown_table(["measure", "value"], rows)]
    lines += ["", f"Command: `{result['command']}`", f"Date: {result['date']}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    try:
        controller = LearnedController.load(args.policy)
    except PolicyError as error:
        raise SystemExit(f"error: {error}") from None
    if args.target or args.draft:
        pair = specrl.load_pair(target=args.target, draft=args.draft, device=args.device)
    else:
        pair = specrl.load_pair(preset=args.preset, device=args.device)
    warning = controller.pair_warning(pair.name)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)

    timed = TimedController(controller)
    timed_lookups(timed)
    decoded = decode(pair, timed, args)
    in_decode_us = np.median(timed.act_ns) / 1e3
    stop_us = np.asarray(timed.stop_ns) / 1e3
    # one lookup before each decision (and one after the last step of each generation)
    lookup_us = np.zeros(len(stop_us))
    if timed.lookup_ns:
        lookup_us = np.asarray(timed.lookup_ns[: len(stop_us)]) / 1e3
    decision_us = np.median(np.asarray(timed.act_ns) / 1e3 + stop_us + lookup_us)
    alone_us = time_alone(controller, timed.observations, args.calls, args.warmup) / 1e3
    result = {
        "policy": args.policy,
        "policy_pair": controller.pair,
        "pair": pair.name,
        "device": str(pair.device),
        "alone_us_median": float(np.median(alone_us)),
        "alone_us_p90": float(np.percentile(alone_us, 90)),
        "alone_calls": args.calls,
        "in_decode_us_median": float(in_decode_us),
        "stop_us_median": float(np.median(stop_us)),
        "stop_us_mean": float(np.mean(stop_us)),
        "lookup_us_median": float(np.median(lookup_us)),
        "decision_us_median": float(decision_us),
        **decoded,
        # the step decision and the per-token stop calls together, per iteration
        "share_of_iteration": float(decision_us / 1e3 / decoded["mean_iteration_ms"]),
        "command": " ".join(["python", *sys.argv])
        if argv is None
        else f"policy_overhead.py {' '.join(argv)}",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    table = markdown(result)
    print(table)
    if args.json_path:
        write_text_atomic(args.json_path, json.dumps(result, indent=2) + "\n")
    if args.markdown:
        write_text_atomic(args.markdown, table)
    return result


if __name__ == "__main__":
    main()
