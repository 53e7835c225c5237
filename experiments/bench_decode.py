"""Decoding throughput, side by side: our engine against Hugging Face ``generate``.

What it measures, in ONE run on one (target, draft) pair and the test prompts of
each domain (code, prose, math), for every temperature asked for (greedy and 1 by default):

  (a) ours plain        plain autoregressive decoding with our engine (StaticController(0));
  (b) HF generate       ``pair.target.generate`` without an assistant;
  (c) ours k=K          our speculative decoder at static k = K, tau = 0;
  (d) HF assist k=K     ``generate(assistant_model=pair.draft)`` drafting exactly K tokens
                        (schedule "constant", confidence threshold off), and HF's own
                        defaults: "HF assist default" (the draft's generation_config as it is,
                        resolved with transformers' global defaults: 20 tokens, "constant",
                        confidence threshold 0.4) and "HF assist heuristic" (schedule
                        "heuristic", otherwise the same defaults; HF keeps its adapted length
                        across calls, and so does this row).

In transformers 5.x the assisted-generation settings are read from the *assistant's*
``generation_config`` (passing them to ``generate()`` does nothing), so each HF-assisted row
owns a GenerationConfig that is swapped onto the draft for its calls only. The adaptive
confidence threshold of HF runs only when scikit-learn is installed; bench.json says which.

Every configuration produces exactly ``--max-new-tokens`` tokens (ours: stop_at_eos=False;
HF: eos_token_id=None) from the same prompt ids. Timing is the wall clock of the whole
generate call, prefill included, device-synchronised. One untimed warm-up run of every
configuration, then ``--repeats`` repeats; within a repeat all configurations are
interleaved over the prompts (order shuffled, seeded) so machine noise hits all alike. Per
configuration and domain the figure is the median over repeats of
(sum of tokens / sum of seconds over the prompts); ratios are against (a) in the same run.
It also records acceptance (ours), tokens per target verification (all), whether greedy
outputs equal our plain output, and the per-forward costs of both models at a ~200-token
context (target at 1 and k+1 new tokens, draft at 1).

Run from the repository root:

    python experiments/bench_decode.py                      # default "small" pair, full run
    python experiments/bench_decode.py --preset tiny --prompts-per-domain 1 \\
        --max-new-tokens 24 --repeats 1 --k-values 1 3      # seconds-long smoke run
    python experiments/bench_decode.py --target ID_OR_PATH --draft ID_OR_PATH \\
        --prompts prompts.json                              # any HF pair sharing a tokenizer

Writes ``bench.json`` (raw runs, summaries, config, machine) and ``bench.md`` (tables) to
``--out`` (default ``results/bench_decode/<pair name>/``), and its section of the result folder's
``README.md``. A benchmark, not a test: speed
claims are the ratios, and absolute times only mean something on a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

import torch
from benchmarks.decode import (
    METHOD,
    benchmark,
    build_configs,
    heuristic_lengths,
    select_prompts,
)
from benchmarks.decode_page import render_markdown
from benchmarks.decode_summary import summarize, warn_mismatches
from benchmarks.forward_costs import measure_forward_costs
from benchmarks.prompts import DOMAINS
from benchmarks.result_folder import Run, write_readme

import specrl
from specrl.evaluation.machine import machine_info, pair_info, warn_if_busy
from specrl.io import write_text_atomic
from specrl.provenance import command_line, load_average

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    pair = parser.add_argument_group("pair")
    pair.add_argument(
        "--preset",
        default=None,
        help="embedded pair preset: 'small' (used when neither this nor --target is given) or "
        "'tiny' for a quick run",
    )
    pair.add_argument("--target", default=None, help="HF id or local path of the target (with --draft)")
    pair.add_argument("--draft", default=None, help="HF id or local path of the draft (with --target)")
    pair.add_argument("--device", default=None, help="torch device; unset: cuda if available, else cpu")
    pair.add_argument(
        "--dtype",
        default=None,
        help="torch dtype name, e.g. float32 or bfloat16; unset: bf16 on GPU, fp32 on CPU",
    )
    pair.add_argument(
        "--kv-cache",
        choices=("dynamic", "static"),
        default="dynamic",
        help="our engine's KV cache: dynamic (grows by concatenation) or static (allocated once, "
        "rolled back by moving its length)",
    )
    pair.add_argument(
        "--compile", action="store_true", help="torch.compile our decode forwards (needs --kv-cache static)"
    )
    pair.add_argument(
        "--prompts",
        type=Path,
        default=None,
        help="JSON prompts file, {domain: [text]} or a zoo prompts.json ({'test': {...}}); "
        "required for --target/--draft pairs, overrides the embedded pair's prompts",
    )
    work = parser.add_argument_group("workload")
    work.add_argument("--domains", nargs="+", default=list(DOMAINS), help="prompt domains to run")
    work.add_argument("--prompts-per-domain", type=int, default=4, help="test prompts per domain")
    work.add_argument(
        "--max-new-tokens",
        type=int,
        default=128,
        help="tokens every configuration generates per prompt (EOS does not stop)",
    )
    work.add_argument(
        "--k-values",
        type=int,
        nargs="+",
        default=list(range(1, 9)),
        help="static draft lengths k for ours and HF assisted (tau = 0, no threshold)",
    )
    work.add_argument(
        "--temperatures",
        type=float,
        nargs="+",
        default=[0.0, 1.0],
        help="sampling temperatures; 0 is greedy (top_k=0 and top_p=1 otherwise)",
    )
    work.add_argument(
        "--no-hf-defaults",
        action="store_true",
        help="skip the 'HF assist default' and 'HF assist heuristic' rows",
    )
    timing = parser.add_argument_group("timing")
    timing.add_argument("--repeats", type=int, default=3, help="timed repeats after the warm-up")
    timing.add_argument(
        "--seed",
        type=int,
        default=0,
        help="base seed: prompt i samples with seed+i; also seeds the run order",
    )
    timing.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads; unset: torch's own. On a busy CPU machine use 1: "
        "oversubscribed threads slow small models 10-100x",
    )
    timing.add_argument(
        "--forward-context",
        type=int,
        default=200,
        help="context length (tokens) at which single forwards are timed",
    )
    timing.add_argument("--forward-reps", type=int, default=30, help="timed repetitions of each forward")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory; unset: results/bench_decode/<pair name>/ in the repository",
    )
    args = parser.parse_args(argv)
    if (args.target is None) != (args.draft is None):
        parser.error("give both --target and --draft, or neither")
    if min(args.k_values) < 1:
        parser.error("--k-values must be >= 1 (k = 0 is the plain row, always included)")
    if args.repeats < 1 or args.prompts_per_domain < 1 or args.max_new_tokens < 1:
        parser.error("--repeats, --prompts-per-domain and --max-new-tokens must be >= 1")
    args.k_values = sorted(set(args.k_values))
    return args


def default_out(pair: specrl.ModelPair) -> Path:
    return REPO / "results" / "bench_decode" / re.sub(r"[^A-Za-z0-9._+-]+", "_", pair.name).strip("_")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    pair = specrl.load_pair(
        args.target,
        args.draft,
        preset=args.preset,
        device=args.device,
        dtype=args.dtype,
        seed=0,
        kv_cache=args.kv_cache,
        compile=args.compile,
    )
    warn_if_busy(pair)
    prompts = select_prompts(
        pair,
        args.domains,
        args.prompts_per_domain,
        args.max_new_tokens,
        max(args.k_values),
        args.seed,
        args.prompts,
    )
    configs = build_configs(pair, args.k_values, args.temperatures, hf_defaults=not args.no_hf_defaults)
    machine = machine_info(pair)

    records = benchmark(configs, prompts, pair, args.max_new_tokens, args.repeats, args.seed)
    rows = summarize(configs, records, args.domains)
    warn_mismatches(rows)
    forward_costs = measure_forward_costs(
        pair, [p.ids for p in prompts], args.k_values, args.forward_context, args.forward_reps
    )
    machine["loadavg_end"] = load_average()

    report = {
        "date": started,
        "command": command_line(),
        "argv": sys.argv,
        "config": {
            key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()
        },
        "pair": {**pair_info(pair), "card": pair.card},
        "machine": machine,
        "method": METHOD,
        "prompts": [prompt.describe() for prompt in prompts],
        "results": rows,
        "hf_heuristic_final_num_assistant_tokens": heuristic_lengths(configs),
        "forward_costs": forward_costs,
        "runs": records,
    }
    out = args.out or default_out(pair)
    markdown = render_markdown(report)
    write_text_atomic(out / "bench.json", json.dumps(report, indent=1, default=str) + "\n")
    write_text_atomic(out / "bench.md", markdown)
    measured = (
        "Plain, static, TCP and Hugging Face assisted decoding on the default pair, and the forward "
        "costs (wall clock)."
    )
    run = Run("Decoding benchmark", measured, report["command"], machine, ["bench.md"], ["bench.json"])
    write_readme(out, run)
    print(markdown)
    print(f"wrote {out / 'bench.json'} and {out / 'bench.md'}")
    return report


if __name__ == "__main__":
    main()
