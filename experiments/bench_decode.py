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
``--out`` (default ``results/bench_decode/<pair name>/``). A benchmark, not a test: speed
claims are the ratios, and absolute times only mean something on a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import random
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import GenerationConfig

import specrl
from specrl.engine.cache import KVCache
from specrl.engine.timing import DeviceClock
from specrl.engine.types import throughput
from specrl.evaluation.machine import command_line, loadavg, machine_info, warn_if_busy
from specrl.hf_assisted import (
    ForwardCounter,
    assistant_config,
    hf_generate,
    resolved_assistant_settings,
)
from specrl.io import write_text_atomic
from specrl.tables import markdown_table

REPO = Path(__file__).resolve().parent.parent
DOMAINS = ("code", "prose", "math")


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


# --------------------------------------------------------------------------- configurations


@dataclass
class Config:
    """One row of the table at one temperature."""

    key: str  # unique within a temperature, e.g. "ours-k3", "hf-assist-default"
    label: str
    engine: str  # "ours" or "hf"
    k: int  # ours: static k (0 = plain); hf: assistant tokens (0 = no assistant; -1 = HF default)
    temperature: float
    assistant: GenerationConfig | None = None  # hf rows with an assistant: its generation_config
    decoder: specrl.SpeculativeDecoder | None = None  # ours rows

    @property
    def speculative(self) -> bool:
        return self.assistant is not None or (self.engine == "ours" and self.k > 0)


def build_configs(pair: specrl.ModelPair, args: argparse.Namespace) -> list[Config]:
    configs = []
    for t in args.temperatures:
        configs.append(
            Config(
                "ours-plain",
                "ours plain (k=0)",
                "ours",
                0,
                t,
                decoder=specrl.SpeculativeDecoder(pair, specrl.StaticController(0)),
            )
        )
        configs.append(Config("hf-plain", "HF generate", "hf", 0, t))
        for k in args.k_values:
            configs.append(
                Config(
                    f"ours-k{k}",
                    f"ours k={k}",
                    "ours",
                    k,
                    t,
                    decoder=specrl.SpeculativeDecoder(pair, specrl.StaticController(k, 0.0)),
                )
            )
        for k in args.k_values:
            gc = assistant_config(
                pair.draft.generation_config,
                num_assistant_tokens=k,
                num_assistant_tokens_schedule="constant",
                assistant_confidence_threshold=0.0,
            )
            configs.append(Config(f"hf-assist-k{k}", f"HF assist k={k}", "hf", k, t, assistant=gc))
        if not args.no_hf_defaults:
            default = assistant_config(pair.draft.generation_config)
            settings = resolved_assistant_settings(default)
            configs.append(
                Config(
                    "hf-assist-default",
                    "HF assist default ({num_assistant_tokens}, "
                    "{num_assistant_tokens_schedule}, conf {assistant_confidence_threshold})".format(
                        **settings
                    ),
                    "hf",
                    -1,
                    t,
                    assistant=default,
                )
            )
            heuristic = assistant_config(
                pair.draft.generation_config, num_assistant_tokens_schedule="heuristic"
            )
            settings = resolved_assistant_settings(heuristic)
            configs.append(
                Config(
                    "hf-assist-heuristic",
                    "HF assist heuristic (start {num_assistant_tokens}, "
                    "conf {assistant_confidence_threshold})".format(**settings),
                    "hf",
                    -1,
                    t,
                    assistant=heuristic,
                )
            )
    return configs


# --------------------------------------------------------------------------- prompts


@dataclass
class Prompt:
    domain: str
    index: int  # within its domain
    ids: list[int]
    seed: int
    truncated_from: int | None = None


def load_prompt_texts(pair: specrl.ModelPair, path: Path | None) -> dict[str, list[str]]:
    if path is not None:
        data = json.loads(path.read_text())
        return data.get("test", data)
    if pair.prompts.get("test"):
        return pair.prompts["test"]
    raise SystemExit(
        "this pair has no embedded prompts: pass --prompts FILE (JSON {domain: [text]}, or a "
        "zoo prompts.json such as $SPECRL_HOME/zoo/<preset>-seed0/prompts.json)"
    )


def select_prompts(pair: specrl.ModelPair, args: argparse.Namespace) -> list[Prompt]:
    """The first N test prompts of each domain, tokenized once; tails kept if too long."""
    texts = load_prompt_texts(pair, args.prompts)
    room = pair.context_length - args.max_new_tokens - max(args.k_values) - 2
    if room < 1:
        raise SystemExit(
            f"--max-new-tokens {args.max_new_tokens} leaves no room for a prompt in the "
            f"context window of {pair.context_length} tokens"
        )
    prompts = []
    for domain in args.domains:
        if not texts.get(domain):
            raise SystemExit(f"no prompts for domain {domain!r}; have {sorted(texts)}")
        for i, text in enumerate(texts[domain][: args.prompts_per_domain]):
            ids = pair.encode(text)
            truncated = len(ids) if len(ids) > room else None
            prompts.append(Prompt(domain, i, ids[-room:], args.seed + len(prompts), truncated))
    return prompts


# --------------------------------------------------------------------------- running one generation


def run_one(
    config: Config,
    prompt: Prompt,
    pair: specrl.ModelPair,
    max_new_tokens: int,
    clock: DeviceClock,
    counter: ForwardCounter,
) -> dict:
    """One timed generate call (prefill included); returns its raw numbers and token ids."""
    counter.reset()
    extra: dict = {}
    if config.engine == "ours":
        assert config.decoder is not None
        start = clock.now()
        out = config.decoder.generate(
            prompt.ids,
            max_new_tokens=max_new_tokens,
            temperature=config.temperature,
            seed=prompt.seed,
            stop_at_eos=False,
        )
        seconds = clock.now() - start
        ids = out.token_ids
        stats = out.stats.to_dict()
        extra = {key: stats[key] for key in ("steps", "proposed", "accepted", "prefill_seconds")}
        verifies = out.stats.steps
    else:
        run = hf_generate(
            pair,
            prompt.ids,
            max_new_tokens,
            config.temperature,
            prompt.seed,
            config.assistant,
            counter=counter,
        )
        ids, seconds = run.ids, run.seconds
        verifies = counter.counts["target"]  # HF: prefill and first verification are one forward
    return {
        "new_tokens": len(ids),
        "seconds": seconds,
        "target_forwards": counter.counts["target"],
        "draft_forwards": counter.counts["draft"],
        "verifies": verifies,
        **extra,
        "ids": ids,
        "ids_sha1": hashlib.sha1(str(ids).encode()).hexdigest()[:12],
    }


# --------------------------------------------------------------------------- the benchmark loop


def benchmark(
    configs: list[Config], prompts: list[Prompt], pair: specrl.ModelPair, args: argparse.Namespace
) -> list[dict]:
    clock = DeviceClock(pair.device)
    counter = ForwardCounter(pair)
    order_rng = random.Random(args.seed)
    plain_ids: dict[int, list[int]] = {}  # prompt number -> ours plain greedy output
    records = []
    total = len(configs) * (1 + args.repeats * len(prompts))
    with tqdm(total=total, desc="bench", unit="gen", dynamic_ncols=True) as bar:
        for config in configs:  # warm-up: every configuration once, untimed
            bar.set_postfix_str(f"warm-up T={config.temperature:g} {config.key}")
            run_one(config, prompts[0], pair, args.max_new_tokens, clock, counter)
            bar.update()
        for repeat in range(args.repeats):
            for p, prompt in enumerate(prompts):
                for config in order_rng.sample(configs, len(configs)):
                    bar.set_postfix_str(
                        f"rep {repeat + 1} {prompt.domain}#{prompt.index} "
                        f"T={config.temperature:g} {config.key}"
                    )
                    record = run_one(config, prompt, pair, args.max_new_tokens, clock, counter)
                    record.update(
                        config=config.key,
                        temperature=config.temperature,
                        domain=prompt.domain,
                        prompt=prompt.index,
                        repeat=repeat,
                        prompt_number=p,
                    )
                    records.append(record)
                    if config.key == "ours-plain" and config.temperature == 0:
                        plain_ids.setdefault(p, record["ids"])
                    bar.update()
    counter.remove()
    check_greedy(records, plain_ids)
    check_lengths(records, args.max_new_tokens)
    return records


def check_greedy(records: list[dict], plain_ids: dict) -> None:
    """Greedy rows: mark whether each output equals our plain output; drop the ids."""
    for record in records:
        ids, p = record.pop("ids"), record.pop("prompt_number")
        if record["temperature"] == 0:
            record["matches_plain"] = ids == plain_ids[p]


def check_lengths(records: list[dict], max_new_tokens: int) -> None:
    short = {r["config"] for r in records if r["new_tokens"] != max_new_tokens}
    if short:
        print(f"WARNING: not every run produced {max_new_tokens} tokens: {sorted(short)}", file=sys.stderr)


# --------------------------------------------------------------------------- per-forward costs


def context_tokens(prompts: list[Prompt], n: int) -> list[int]:
    """At least ``n`` tokens of real text: the prompts concatenated (tiled if short)."""
    pool = [t for prompt in prompts for t in prompt.ids]
    return (pool * (n // len(pool) + 1))[:n]


def measure_forward_costs(pair: specrl.ModelPair, prompts: list[Prompt], args: argparse.Namespace) -> dict:
    """Median time of one cached forward: target at 1 and k+1 new tokens, draft at 1, at a fixed context."""
    clock = DeviceClock(pair.device)
    widest = max(args.k_values) + 1
    context = min(args.forward_context, pair.context_length - widest - 1)
    tokens = torch.tensor([context_tokens(prompts, context + widest)], dtype=torch.long, device=pair.device)
    models = {
        "target": KVCache(pair.target, pair.vocab_size),
        "draft": KVCache(pair.draft, pair.vocab_size),
    }
    for model in models.values():
        model.feed(tokens[:, :context])
    cases = [("target", n) for n in sorted({1, *(k + 1 for k in args.k_values)})] + [("draft", 1)]
    times: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    warmup = 3
    for rep in tqdm(range(warmup + args.forward_reps), desc="forwards", unit="rep", dynamic_ncols=True):
        for role, n in cases:  # interleaved, like the generations
            model = models[role]
            start = clock.now()
            model.feed(tokens[:, context : context + n], keep=n)
            elapsed = clock.now() - start
            model.rollback([context])
            if rep >= warmup:
                times[(role, n)].append(elapsed)
    ms = {f"{role}_{n}": 1000 * statistics.median(values) for (role, n), values in times.items()}
    return {
        "context": context,
        "reps": args.forward_reps,
        "median_ms": ms,
        "draft_over_target": ms["draft_1"] / ms["target_1"],
        "raw_ms": {f"{role}_{n}": [1000 * v for v in values] for (role, n), values in times.items()},
    }


# --------------------------------------------------------------------------- summary


def records_throughput(records: list[dict]) -> float:
    return throughput(sum(r["new_tokens"] for r in records), sum(r["seconds"] for r in records))


def summarize_cell(records: list[dict], plain: list[dict], repeats: int) -> dict:
    """One configuration on one domain: median over repeats of sum tokens / sum seconds."""
    per_repeat = [records_throughput([r for r in records if r["repeat"] == i]) for i in range(repeats)]
    plain_per_repeat = [records_throughput([r for r in plain if r["repeat"] == i]) for i in range(repeats)]
    median, plain_median = statistics.median(per_repeat), statistics.median(plain_per_repeat)
    tokens = sum(r["new_tokens"] for r in records)
    cell = {
        "tokens_per_s": median,
        "tokens_per_s_repeats": per_repeat,
        "ratio_vs_plain": median / plain_median if plain_median else None,
        "ratio_vs_plain_paired_median": statistics.median(
            a / b for a, b in zip(per_repeat, plain_per_repeat, strict=True) if b
        ),
        "tokens_per_verify": tokens / max(1, sum(r["verifies"] for r in records)),
        "draft_forwards_per_token": sum(r["draft_forwards"] for r in records) / max(1, tokens),
        "runs": len(records),
    }
    if "proposed" in records[0]:
        proposed = sum(r["proposed"] for r in records)
        cell["acceptance_rate"] = sum(r["accepted"] for r in records) / proposed if proposed else 0.0
        cell["mean_accepted_length"] = cell["tokens_per_verify"]  # new tokens / steps
    if "matches_plain" in records[0]:
        cell["matches_plain"] = all(r["matches_plain"] for r in records)
    return cell


def summarize(configs: list[Config], records: list[dict], args: argparse.Namespace) -> list[dict]:
    rows = []
    for config in configs:

        def select(key: str, domain: str | None, t: float = config.temperature) -> list[dict]:
            return [
                r
                for r in records
                if r["config"] == key and r["temperature"] == t and (domain is None or r["domain"] == domain)
            ]

        cells = {}
        for domain in [*args.domains, "all"]:
            d = None if domain == "all" else domain
            cells[domain] = summarize_cell(select(config.key, d), select("ours-plain", d), args.repeats)
        row = {
            "key": config.key,
            "label": config.label,
            "engine": config.engine,
            "k": config.k,
            "temperature": config.temperature,
            "domains": cells,
        }
        if config.assistant is not None:
            row["assistant_generation_config"] = resolved_assistant_settings(config.assistant)
        if config.temperature == 0 and config.key != "ours-plain":
            row["matches_plain"] = all(cell["matches_plain"] for cell in cells.values())
        rows.append(row)
    return rows


def warn_mismatches(rows: list[dict]) -> None:
    for row in rows:
        if row.get("matches_plain") is False:
            why = (
                "ours must equal plain greedy decoding exactly: an engine bug, or a numerical near-tie "
                "between batched and single-token forwards"
                if row["engine"] == "ours"
                else "HF's own numerics (batched verification, other kernels) may flip near-ties"
            )
            print(
                f"WARNING: greedy output of '{row['label']}' differs from ours plain ({why})", file=sys.stderr
            )


# --------------------------------------------------------------------------- reports


def fmt_cell(cell: dict) -> str:
    text, ratio = f"{cell['tokens_per_s']:.1f}", cell["ratio_vs_plain"]
    return f"{text} ({ratio:.2f}x)" if ratio is not None else text


def fmt_acceptance(row: dict, cell: dict) -> str:
    if row["engine"] == "ours" and row["k"] > 0:
        return f"{cell['acceptance_rate']:.2f} / {cell['tokens_per_verify']:.2f}"
    return f"- / {cell['tokens_per_verify']:.2f}"


def render_markdown(report: dict) -> str:
    cfg, rows = report["config"], report["results"]
    columns = [*cfg["domains"], "all"]
    md = [
        f"# Decoding throughput: {report['pair']['name']}",
        "",
        f"{cfg['max_new_tokens']} new tokens per prompt, {cfg['prompts_per_domain']} test prompts per "
        f"domain, median of {cfg['repeats']} interleaved repeats after a warm-up; wall clock of the whole "
        f"generate call (prefill included). Cells: tokens/s (ratio vs ours plain in this run). "
        f"Device {report['machine']['device']} ({report['machine']['dtype']}), "
        f"{report['machine']['cpu_count']} CPUs, torch {report['machine']['torch']}, "
        f"transformers {report['machine']['transformers']}; HF confidence threshold "
        f"{report['machine']['hf_confidence_threshold']}; our KV cache {cfg.get('kv_cache', 'dynamic')}"
        f"{', compiled' if cfg.get('compile') else ''}.",
        "",
    ]
    for t in cfg["temperatures"]:
        at_t = [row for row in rows if row["temperature"] == t]
        name = "greedy" if t == 0 else f"temperature {t:g}"
        md += [f"## Throughput, {name}", ""]
        md.append(
            markdown_table(
                ["configuration", *columns],
                [[row["label"], *(fmt_cell(row["domains"][c]) for c in columns)] for row in at_t],
            )
        )
        md += [
            "",
            f"Acceptance, {name}: acceptance rate / new tokens per target verification "
            "(ours: mean accepted length incl. the bonus token; HF: tokens per target forward).",
            "",
        ]
        md.append(
            markdown_table(
                ["configuration", *columns],
                [
                    [row["label"], *(fmt_acceptance(row, row["domains"][c]) for c in columns)]
                    for row in at_t
                    if row["key"] != "ours-plain"
                ],
            )
        )
        if t == 0:
            bad = [row["label"] for row in at_t if row.get("matches_plain") is False]
            md += [
                "",
                "Greedy outputs equal ours plain: "
                + ("all configurations." if not bad else "NO for " + ", ".join(bad) + "."),
            ]
        md.append("")
    costs = report["forward_costs"]
    target_1 = costs["median_ms"]["target_1"]
    md += [f"## Forward costs (batch 1, context {costs['context']}, median of {costs['reps']})", ""]
    lines = []
    for key, ms in costs["median_ms"].items():
        role, n = key.split("_")
        lines.append([f"{role}, {n} new token{'s' if n != '1' else ''}", f"{ms:.3f}", f"{ms / target_1:.3f}"])
    md.append(markdown_table(["forward", "ms", "vs target 1 token"], lines))
    md += [
        "",
        f"draft / target (1 token each): {costs['draft_over_target']:.3f}",
        "",
        f"Command: `{report['command']}`",
        f"Date: {report['date']}",
        "",
    ]
    return "\n".join(md)


def default_out(pair: specrl.ModelPair) -> Path:
    return REPO / "results" / "bench_decode" / re.sub(r"[^A-Za-z0-9._+-]+", "_", pair.name).strip("_")


# --------------------------------------------------------------------------- main


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
    prompts = select_prompts(pair, args)
    configs = build_configs(pair, args)
    machine = machine_info(pair)

    records = benchmark(configs, prompts, pair, args)
    rows = summarize(configs, records, args)
    warn_mismatches(rows)
    forward_costs = measure_forward_costs(pair, prompts, args)
    machine["loadavg_end"] = loadavg()

    report = {
        "date": started,
        "command": command_line(),
        "argv": sys.argv,
        "config": {
            key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()
        },
        "pair": {
            "name": pair.name,
            "vocab_size": pair.vocab_size,
            "context_length": pair.context_length,
            "parameters": {
                role: sum(p.numel() for p in model.parameters())
                for role, model in (("target", pair.target), ("draft", pair.draft))
            },
            "card": pair.card,
        },
        "machine": machine,
        "method": {
            "timing": "wall clock of the whole generate call incl. prefill, device-synchronised",
            "aggregate": "median over repeats of sum(tokens)/sum(seconds) over a domain's prompts",
            "order": "one untimed warm-up per configuration; then per repeat and prompt, all "
            "configurations in a seeded random order",
            "hf_assistant_settings": "set on a copy of the draft's generation_config, swapped onto "
            "the draft for that row's calls only (transformers 5.x reads "
            "them from the assistant, not from generate() kwargs)",
            "eos": "ours stop_at_eos=False, HF eos_token_id=None: every run emits max_new_tokens",
        },
        "prompts": [
            {
                "domain": p.domain,
                "index": p.index,
                "tokens": len(p.ids),
                "seed": p.seed,
                "truncated_from": p.truncated_from,
            }
            for p in prompts
        ],
        "results": rows,
        "hf_heuristic_final_num_assistant_tokens": {
            f"T={c.temperature:g}": c.assistant.num_assistant_tokens
            for c in configs
            if c.key == "hf-assist-heuristic" and c.assistant is not None
        },
        "forward_costs": forward_costs,
        "runs": records,
    }
    out = args.out or default_out(pair)
    markdown = render_markdown(report)
    write_text_atomic(out / "bench.json", json.dumps(report, indent=1, default=str) + "\n")
    write_text_atomic(out / "bench.md", markdown)
    print(markdown)
    print(f"wrote {out / 'bench.json'} and {out / 'bench.md'}")
    return report


if __name__ == "__main__":
    main()
