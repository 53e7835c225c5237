"""specrl inside HF ``generate`` against HF's own assisted generation: same pair, same prompts.

Rows, all through ``pair.target.generate`` on the same prompt ids, greedy, exactly
``--max-new-tokens`` tokens each (``eos_token_id=None``):

  hf plain                      ``generate`` without a draft (the reference: ratios are against it);
  hf assisted default           ``assistant_model=draft`` with the draft's generation_config as is
                                (transformers' defaults: 20 tokens, schedule "constant", confidence
                                threshold 0.4);
  hf assisted heuristic         the same with schedule "heuristic" (HF adapts the length and keeps
                                it across calls; so does this row, on its own config);
  hf assisted constant k=4      schedule "constant", 4 tokens, confidence threshold off;
  specrl static k=4             ``custom_generate=specrl.hf.speculative_generate``, StaticController(4);
  specrl tcp                    the same with the TCP-like heuristic;
  specrl learned:<policy>       the same with the exported policy (default: the shipped one).

In transformers 5.x the assisted settings are read from the assistant's generation_config, so
each assisted row owns a copy that is swapped onto the draft for its calls only
(:mod:`specrl.hf_assisted`). One untimed warm-up pass, then ``--repeats`` passes; within a pass
every prompt runs every row in a shuffled (seeded) order, so machine noise hits all alike. A
row's figure is the median over passes of (tokens / seconds summed over the prompts), per domain
and over all; the time is the wall clock of the whole ``generate`` call (prefill included,
device-synchronised). It also records new tokens per target forward and whether each row's
output equals ``hf plain``'s token for token.

Run from the repository root (offline, on the embedded default pair; 3-4 minutes on 2 busy CPU cores):

    python experiments/bench_hf_generate.py
    python experiments/bench_hf_generate.py --quick        # seconds: 1 prompt/domain, 16 tokens, 1 pass

Writes ``results/hf_generate.json`` (runs, summaries, config, machine) and ``results/hf_generate.md``.
A benchmark, not a test: the ratios are the claim; absolute speeds only mean something on the
machine that produced them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import torch

import specrl
from specrl.engine.timing import DeviceClock
from specrl.engine.types import throughput
from specrl.evaluation.machine import command_line, describe_commit, describe_machine, machine_info, pair_info
from specrl.hf import speculative_generate
from specrl.hf_assisted import (
    ForwardCounter,
    assistant_config,
    assistant_settings,
    confidence_threshold_variant,
    resolved_assistant_settings,
)
from specrl.io import write_text_atomic
from specrl.tables import markdown_table

REPO = Path(__file__).resolve().parent.parent
DOMAINS = ("code", "prose", "math")
REFERENCE = "hf plain"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompts-per-domain", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--k", type=int, default=4, help="k of the static and constant-schedule rows")
    parser.add_argument("--policy", default="default", help="exported policy folder or shipped name")
    parser.add_argument("--seed", type=int, default=0, help="seed of the row order")
    parser.add_argument("--out", default=str(REPO / "results" / "hf_generate"), help="output stem")
    parser.add_argument("--quick", action="store_true", help="1 prompt/domain, 16 tokens, 1 pass")
    args = parser.parse_args(argv)
    if args.quick:
        args.max_new_tokens, args.prompts_per_domain, args.repeats = 16, 1, 1
    return args


def resolve_policy(policy: str | Path) -> specrl.LearnedController:
    """A policy folder, or a shipped policy's name (package data, or the top-level ``policies/``)."""
    candidates = [Path(policy)]
    if not Path(policy).is_dir():
        candidates += [REPO / "specrl" / "policies" / str(policy), REPO / "policies" / str(policy)]
    for folder in candidates:
        if (folder / "metadata.json").is_file():
            return specrl.LearnedController.load(folder)
    return specrl.LearnedController.load(policy)  # a name the loader itself knows


@dataclass
class Row:
    """One configuration: how to call ``generate`` on a prompt."""

    name: str
    kwargs: dict = field(default_factory=dict)
    assistant: object = None  # the assisted rows' GenerationConfig, swapped onto the draft
    specrl: bool = False


def make_rows(pair: specrl.ModelPair, k: int, policy: specrl.LearnedController) -> list[Row]:
    draft_config = pair.draft.generation_config
    rows = [
        Row(REFERENCE),
        Row("hf assisted default", {"assistant_model": pair.draft}, assistant_config(draft_config)),
        Row(
            "hf assisted heuristic",
            {"assistant_model": pair.draft},
            assistant_config(draft_config, num_assistant_tokens_schedule="heuristic"),
        ),
        Row(
            f"hf assisted constant k={k}",
            {"assistant_model": pair.draft},
            assistant_config(
                draft_config,
                num_assistant_tokens=k,
                num_assistant_tokens_schedule="constant",
                assistant_confidence_threshold=0.0,
            ),
        ),
    ]
    for name, controller in (
        (f"specrl static k={k}", specrl.StaticController(k)),
        ("specrl tcp", specrl.TCPController()),
        (f"specrl {policy.name}", policy),
    ):
        kwargs = {
            "custom_generate": speculative_generate,
            "draft": pair.draft,
            "controller": controller,
            "return_dict_in_generate": True,
        }
        rows.append(Row(name, kwargs, specrl=True))
    return rows


def call(pair, row: Row, prompt: list[int], max_new_tokens: int, clock, counter) -> dict:
    """One timed ``generate`` call of ``row``; its new ids, seconds, forwards and (specrl) stats."""
    ids = torch.tensor([prompt], dtype=torch.long, device=pair.device)
    counter.reset()
    with assistant_settings(pair.draft, row.assistant):
        start = clock.now()
        out = pair.target.generate(
            ids, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None, **row.kwargs
        )
        seconds = clock.now() - start
    sequences = out.sequences if row.specrl else out
    run = {
        "ids": sequences[0, len(prompt) :].tolist(),
        "seconds": seconds,
        "target_forwards": counter.counts["target"],
        "draft_forwards": counter.counts["draft"],
    }
    if row.specrl:
        run["proposed"], run["accepted"] = out.stats.proposed, out.stats.accepted
    return run


def run(
    pair: specrl.ModelPair,
    prompts: dict[str, list[list[int]]] | list[list[int]],
    max_new_tokens: int = 64,
    repeats: int = 5,
    policy: str | Path = "default",
    k: int = 4,
    seed: int = 0,
) -> dict:
    """Time every row on every prompt (a warm-up pass, then ``repeats`` interleaved passes)."""
    if not isinstance(prompts, dict):
        prompts = {"all": list(prompts)}
    items = [(domain, p) for domain, ids in prompts.items() for p in ids]
    rows = make_rows(pair, k, resolve_policy(policy))
    clock, order = DeviceClock(pair.device), random.Random(seed)
    runs: list[dict] = []
    with ForwardCounter(pair) as counter:
        for row in rows:  # warm-up: one untimed call per row
            call(pair, row, items[0][1], max_new_tokens, clock, counter)
        for repeat in range(repeats):
            for index, (domain, prompt) in enumerate(items):
                for row in order.sample(rows, len(rows)):
                    record = call(pair, row, prompt, max_new_tokens, clock, counter)
                    runs.append(
                        {"row": row.name, "repeat": repeat, "prompt": index, "domain": domain, **record}
                    )
    return {
        "rows": summarise(rows, runs, list(prompts)),
        "runs": runs,
        "prompts": len(items),
        "config": {
            "max_new_tokens": max_new_tokens,
            "repeats": repeats,
            "k": k,
            "policy": str(policy),
            "seed": seed,
            "domains": {domain: len(ids) for domain, ids in prompts.items()},
            "assistant_settings": {
                row.name: resolved_assistant_settings(row.assistant)
                for row in rows
                if row.assistant is not None
            },
            "hf_confidence_threshold": confidence_threshold_variant(),
        },
    }


def _throughput(runs: list[dict]) -> float:
    """Median over repeats of tokens / seconds summed over the runs of each repeat."""
    by_repeat: dict[int, list[dict]] = {}
    for r in runs:
        by_repeat.setdefault(r["repeat"], []).append(r)
    return statistics.median(
        throughput(sum(len(r["ids"]) for r in rs), sum(r["seconds"] for r in rs)) for rs in by_repeat.values()
    )


def summarise(rows: list[Row], runs: list[dict], domains: list[str]) -> list[dict]:
    reference = {(r["repeat"], r["prompt"]): r["ids"] for r in runs if r["row"] == REFERENCE}
    summaries = []
    for row in rows:
        mine = [r for r in runs if r["row"] == row.name]
        summary = {
            "method": row.name,
            "tokens_per_s": _throughput(mine),
            "per_domain": {d: _throughput([r for r in mine if r["domain"] == d]) for d in domains},
            "tokens_per_target_forward": sum(len(r["ids"]) for r in mine)
            / sum(r["target_forwards"] for r in mine),
            "identical_to_plain": all(r["ids"] == reference[(r["repeat"], r["prompt"])] for r in mine),
        }
        if row.specrl:
            proposed = sum(r["proposed"] for r in mine)
            summary["acceptance_rate"] = sum(r["accepted"] for r in mine) / proposed if proposed else 0.0
        summaries.append(summary)
    base = summaries[0]["tokens_per_s"]
    for summary in summaries:
        summary["ratio_vs_plain"] = summary["tokens_per_s"] / base
    return summaries


def markdown(report: dict, command: str) -> str:
    config, rows = report["config"], report["rows"]
    domains = list(config["domains"])
    header = ["method", *(f"{d} tokens/s" for d in domains if len(domains) > 1), "all tokens/s", "vs plain"]
    header += ["tokens / target forward", "acceptance", "equals plain"]
    table = []
    for row in rows:
        cells = [row["method"]]
        cells += [f"{row['per_domain'][d]:.1f}" for d in domains if len(domains) > 1]
        cells += [f"{row['tokens_per_s']:.1f}", f"{row['ratio_vs_plain']:.2f}x"]
        cells += [f"{row['tokens_per_target_forward']:.2f}"]
        cells += [f"{row['acceptance_rate']:.2f}" if "acceptance_rate" in row else "-"]
        cells += ["yes" if row["identical_to_plain"] else "NO"]
        table.append(cells)
    machine = report.get("machine")
    state = ""
    if machine:
        commit, load = describe_commit(machine), machine.get("loadavg_start")
        if commit:
            state += f"; {commit}"
        if load:
            state += f"; load average at start {load[0]:.2f}"
    lines = [
        "# specrl inside HF generate vs HF assisted generation",
        "",
        f"Pair {report.get('pair', {}).get('name', '?')}; {report['prompts']} prompts "
        f"({', '.join(f'{d}: {n}' for d, n in config['domains'].items())}), greedy, "
        f"{config['max_new_tokens']} new tokens each, median of {config['repeats']} interleaved passes "
        "after a "
        "warm-up; wall clock of the whole `generate` call (prefill included). Every row is a "
        "`target.generate(...)` call: HF's `assistant_model=draft`, or "
        "`custom_generate=specrl.hf.speculative_generate` with a specrl controller. "
        f"HF confidence threshold: {config['hf_confidence_threshold']}.",
        "",
        markdown_table(header, table),
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {describe_machine(machine) if machine else 'not recorded'}{state}; "
        f"{report.get('date', '')}.",
        "",
    ]
    return "\n".join(lines)


def write(report: dict, stem: str | Path, command: str) -> None:
    stem = Path(stem)
    report = {**report, "command": command}
    write_text_atomic(stem.with_suffix(".json"), json.dumps(report, indent=1) + "\n")
    write_text_atomic(stem.with_suffix(".md"), markdown(report, command))


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    pair = specrl.load_pair()
    prompts = {
        domain: [pair.encode(text) for text in pair.prompts["test"][domain][: args.prompts_per_domain]]
        for domain in DOMAINS
    }
    report = run(pair, prompts, args.max_new_tokens, args.repeats, args.policy, args.k, args.seed)
    report["pair"] = pair_info(pair)
    report["machine"] = machine_info(pair)
    report["date"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    write(report, args.out, command_line())
    print(markdown(report, command_line()))
    return report


if __name__ == "__main__":
    main()
