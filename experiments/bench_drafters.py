"""The drafter pool measured in the real loop: acceptance, cost and speed-up of every drafter, per domain.

For every domain, every drafter (``draft``, ``draft-mid``, ``draft-int8``, ``draft-int4``, ``ngram``,
``cascade``) and every k of ``--ks``, greedy decoding of the same prompts with
``StaticController(k, 0, drafter)``, interleaved with plain decoding (k = 0): within a pass every
prompt runs every configuration in a shuffled (seeded) order, so machine noise hits all alike;
one untimed warm-up pass first. A configuration's speed is the median over passes of (tokens /
seconds summed over the prompts), prefill included; its speed-up is that over plain decoding's.

The best static k of each drafter is chosen on the **validation** prompts and reported on the
**test** prompts (docs/design.md section 4b). Per drafter and domain the table gives:

- acceptance (accepted / proposed) at the chosen k, on test;
- the cost of one drafted position relative to one target verification (draft seconds per
  drafted position over verify seconds per step), on test over every k;
- the speed-up over plain decoding at the chosen k, on test; and the best single drafter per domain.

For the quantised drafts it also gives the change against the full-precision draft at the same k
(acceptance difference, cost ratio): the seed's claim is that quantisation trades acceptance for
cost. Every output is checked token for token against plain decoding. With ``--batch B`` each
domain's prompts are decoded B at a time (one action per step for the B rows, each accepting its own
tokens): the same table for a batch, the drafter pool included.

Run from the repository root (offline, on the embedded default pair; about 30 minutes on 2 CPU cores):

    python experiments/bench_drafters.py
    python experiments/bench_drafters.py --quick     # a minute: 1 prompt, 16 tokens, k 1 and 4, 1 pass
    python experiments/bench_drafters.py --batch 4 --prompts 4 --out results/drafters/batch4   # B = 4

Writes ``results/drafters/drafters.json`` (every run), ``drafters.md`` and ``drafters.png``. A
benchmark, not a test: the ratios are the claim, measured on this machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import statistics
from pathlib import Path

import specrl
from specrl.engine.drafters import DRAFTERS, DrafterPool
from specrl.engine.types import throughput
from specrl.evaluation.machine import command_line, describe_commit, describe_machine, machine_info, pair_info
from specrl.io import write_text_atomic
from specrl.tables import markdown_table

REPO = Path(__file__).resolve().parent.parent
DOMAINS = ("code", "prose", "math")
SPLITS = ("validation", "test")
QUANTIZED = ("draft-int8", "draft-int4")
PLAIN = ("plain", 0)
POOL_RULE = "pool rule"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drafters", default=",".join(DRAFTERS), help="comma-separated drafter names")
    parser.add_argument("--domains", default=",".join(DOMAINS), help="comma-separated prompt domains")
    parser.add_argument("--ks", default="1,2,4,6", help="static k values tried per drafter")
    parser.add_argument("--prompts", type=int, default=3, help="prompts per domain and split")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1, help="prompts decoded together (rows of a batch)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved passes; medians over them")
    parser.add_argument("--seed", type=int, default=0, help="seed of the configuration order")
    parser.add_argument("--preset", default="small", help="embedded pair (small, or tiny for a smoke test)")
    parser.add_argument("--out", default=str(REPO / "results" / "drafters"), help="output folder")
    parser.add_argument("--render", action="store_true", help="rewrite the page and plot from the JSON")
    parser.add_argument("--quick", action="store_true", help="1 prompt, 16 tokens, k 1 and 4, 1 pass")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.max_new_tokens, args.ks, args.repeats = 1, 16, "1,4", 1
    return args


def configurations(drafters: list[str], ks: list[int]) -> list[tuple[str, int]]:
    """Plain decoding, every (drafter, k), and the seed's pool rule over the same drafters at each k."""
    return [PLAIN] + [(drafter, k) for drafter in [*drafters, POOL_RULE] for k in ks]


def controller_of(drafter: str, k: int, drafters: list[str]):
    if drafter == POOL_RULE:
        return specrl.PoolRuleController(tuple(drafters), k=k)
    return specrl.StaticController(k, 0.0, "draft" if drafter == "plain" else drafter)


def call(pair: specrl.ModelPair, controller, prompts: list[list[int]], max_new_tokens: int) -> dict:
    """One generation of ``prompts`` decoded together (a batch of one for a single prompt)."""
    outs = specrl.SpeculativeDecoder(pair, controller).generate_batch(prompts, max_new_tokens=max_new_tokens)
    stats = outs.stats
    return {
        "ids": [out.token_ids for out in outs],
        "tokens": stats.new_tokens,
        "seconds": stats.seconds,
        "draft_seconds": stats.draft_seconds,
        "verify_seconds": stats.verify_seconds,
        "steps": stats.steps,
        "proposed": stats.proposed,
        "accepted": stats.accepted,
        # the batch's draft forwards: one per position its longest-drafting row looked at
        "drafted_positions": sum(
            max(step.draft_forwards for step in steps)
            for steps in zip(*(out.steps for out in outs), strict=False)
        ),
    }


def measure(
    pair, prompts: dict, drafters, ks, max_new_tokens: int, repeats: int, seed: int, batch: int = 1
) -> list[dict]:
    """Every configuration on every group of ``batch`` prompts of every (split, domain): a warm-up,
    then interleaved passes."""
    from tqdm.auto import tqdm

    items = [(split, domain, i // batch, ps[i : i + batch]) for split, by_domain in prompts.items()
             for domain, ps in by_domain.items() for i in range(0, len(ps), batch)]  # fmt: skip
    order, configs = random.Random(seed), configurations(drafters, ks)
    for drafter, k in configs:  # warm-up (and the quantised copies are built here, untimed)
        call(pair, controller_of(drafter, k, drafters), items[0][3], max_new_tokens)
    runs = []
    progress = tqdm(total=repeats * len(items) * len(configs), desc="drafters", unit="gen", mininterval=5.0)
    for repeat in range(repeats):
        for split, domain, index, prompt in items:
            for drafter, k in order.sample(configs, len(configs)):
                record = call(pair, controller_of(drafter, k, drafters), prompt, max_new_tokens)
                runs.append({"split": split, "domain": domain, "prompt": index, "repeat": repeat,
                             "drafter": drafter, "k": k, **record})  # fmt: skip
                progress.update()
    progress.close()
    return runs


def _speed_per_pass(runs: list[dict]) -> dict[int, float]:
    """Tokens / seconds summed over the runs of each pass (repeat)."""
    by_repeat: dict[int, list[dict]] = {}
    for run in runs:
        by_repeat.setdefault(run["repeat"], []).append(run)
    return {
        repeat: throughput(sum(r["tokens"] for r in rs), sum(r["seconds"] for r in rs))
        for repeat, rs in by_repeat.items()
    }


def _median_speed(runs: list[dict]) -> float:
    return statistics.median(_speed_per_pass(runs).values())


def _speedup(runs: list[dict], plain: list[dict]) -> float:
    """Median over passes of (this configuration's tokens/s) / (plain's tokens/s) in the same pass."""
    mine, base = _speed_per_pass(runs), _speed_per_pass(plain)
    return statistics.median(mine[repeat] / base[repeat] for repeat in sorted(mine))


def _acceptance(runs: list[dict]) -> float:
    proposed = sum(r["proposed"] for r in runs)
    return sum(r["accepted"] for r in runs) / proposed if proposed else 0.0


def _cost(runs: list[dict]) -> float | None:
    """Draft seconds per drafted position over verify seconds per step."""
    positions = sum(r["drafted_positions"] for r in runs)
    if not positions:
        return None
    return (sum(r["draft_seconds"] for r in runs) / positions) / (
        sum(r["verify_seconds"] for r in runs) / sum(r["steps"] for r in runs)
    )


def summarise(runs: list[dict], drafters: list[str], domains: list[str], ks: list[int]) -> dict:
    """Per domain and drafter: speed-up per k on both splits, the k chosen on validation, test figures."""

    def select(split, domain, drafter=None, k=None):
        return [r for r in runs if r["split"] == split and r["domain"] == domain
                and (drafter is None or r["drafter"] == drafter) and (k is None or r["k"] == k)]  # fmt: skip

    plain_ids = {
        (r["split"], r["domain"], r["prompt"], r["repeat"]): r["ids"] for r in runs if r["drafter"] == "plain"
    }
    table: dict = {}
    for domain in domains:
        plain = {split: select(split, domain, "plain") for split in SPLITS}
        table[domain] = {"plain_tokens_per_s": _median_speed(plain["test"]), "drafters": {}}
        for drafter in drafters:
            by_k = {  # keyed by str(k), as the JSON has them
                split: {str(k): _speedup(select(split, domain, drafter, k), plain[split]) for k in ks}
                for split in SPLITS
            }
            best_k = max(ks, key=lambda k: by_k["validation"][str(k)])
            test_runs = select("test", domain, drafter)
            table[domain]["drafters"][drafter] = {
                "speedup_by_k": by_k,
                "best_k": best_k,
                "speedup": by_k["test"][str(best_k)],
                "acceptance": _acceptance(select("test", domain, drafter, best_k)),
                "acceptance_by_k": {str(k): _acceptance(select("test", domain, drafter, k)) for k in ks},
                "cost": _cost(test_runs),
                "identical_to_plain": all(
                    r["ids"] == plain_ids[(r["split"], r["domain"], r["prompt"], r["repeat"])]
                    for r in runs if r["domain"] == domain and r["drafter"] == drafter
                ),
            }  # fmt: skip
        rows = table[domain]["drafters"]
        singles = [d for d in drafters if d != POOL_RULE]
        # the best single drafter at its best static k, both chosen on validation
        best = max(singles, key=lambda d: rows[d]["speedup_by_k"]["validation"][str(rows[d]["best_k"])])
        table[domain]["best_drafter"] = best
        if POOL_RULE in rows:
            table[domain]["pool_rule_vs_best_single"] = rows[POOL_RULE]["speedup"] / rows[best]["speedup"]
        if "draft" in drafters:
            full = table[domain]["drafters"]["draft"]
            for name in (q for q in QUANTIZED if q in drafters):
                row = table[domain]["drafters"][name]
                row["vs_draft"] = {
                    "acceptance_change": statistics.mean(
                        row["acceptance_by_k"][str(k)] - full["acceptance_by_k"][str(k)] for k in ks
                    ),
                    "cost_ratio": row["cost"] / full["cost"] if row["cost"] and full["cost"] else None,
                }
    return table


def markdown(report: dict) -> str:
    table, config = report["table"], report["config"]
    drafters, domains = config["drafters"], config["domains"]
    header = ["domain", "drafter", "best k (validation)", "acceptance", "cost / verify", "speed-up (test)",
              "equals plain"]  # fmt: skip
    rows = []
    for domain in domains:
        for drafter in drafters:
            row = table[domain]["drafters"][drafter]
            mark = " (best single)" if drafter == table[domain]["best_drafter"] else ""
            rows.append([
                domain, drafter, str(row["best_k"]), f"{row['acceptance']:.2f}",
                "-" if row["cost"] is None else f"{row['cost']:.3f}", f"{row['speedup']:.2f}x{mark}",
                "yes" if row["identical_to_plain"] else "NO",
            ])  # fmt: skip
    pool_rows = [
        [domain, table[domain]["best_drafter"], f"{table[domain]['pool_rule_vs_best_single']:.2f}x"]
        for domain in domains if "pool_rule_vs_best_single" in table[domain]
    ]  # fmt: skip
    quant_rows = []
    for domain in domains:
        for name in (q for q in QUANTIZED if q in drafters and "vs_draft" in table[domain]["drafters"][q]):
            change = table[domain]["drafters"][name]["vs_draft"]
            ratio = change["cost_ratio"]
            quant_rows.append([domain, name, f"{change['acceptance_change']:+.3f}",
                               "-" if ratio is None else f"{ratio:.2f}x"])  # fmt: skip
    by_k_header = ["domain", "drafter", *(f"k={k}" for k in config["ks"])]
    by_k_rows = []
    for domain in domains:
        for drafter in drafters:
            test = table[domain]["drafters"][drafter]["speedup_by_k"]["test"]
            by_k_rows.append([domain, drafter, *(f"{test[str(k)]:.2f}" for k in config["ks"])])
    machine = report["machine"]
    commit = describe_commit(machine)
    batch = config.get("batch", 1)
    rows_together = "one at a time"
    if batch > 1:
        rows_together = f"decoded {batch} at a time (a batch of {batch} rows, each accepting its own tokens)"
    lines = [
        "# The drafter pool, measured in the real loop" + (f", batches of {batch}" if batch > 1 else ""),
        "",
        f"Pair {report['pair']['name']}; greedy, {config['max_new_tokens']} new tokens; {config['prompts']} "
        f"prompts per domain and split, {rows_together}; median of {config['repeats']} interleaved passes "
        "after a warm-up; "
        "time includes prefill. Best k chosen on the validation prompts, every figure on the test prompts. "
        "Cost: draft seconds per drafted position over target-verify seconds per step (n-gram lookup: no "
        "model forward). Speed-up: over plain decoding of the same prompts, in the same passes.",
        "",
        markdown_table(header, rows),
        "",
        "## The seed's pool rule against the best single drafter (test)",
        "",
        "The pool rule drafts with the drafter of best recent acceptance (window 8, the least recently used "
        "every 16th step), at its k chosen on validation; the best single drafter and its k are chosen on "
        "validation too.",
        "",
        markdown_table(["domain", "best single drafter", "pool rule / best single"], pool_rows)
        if pool_rows
        else "(the pool rule was not measured)",
        "",
        "## Quantised drafts against the full-precision draft (test, mean over k)",
        "",
        markdown_table(["domain", "drafter", "acceptance change", "cost ratio"], quant_rows)
        if quant_rows
        else "(no quantised drafter measured)",
        "",
        "## Speed-up over plain decoding by k (test)",
        "",
        markdown_table(by_k_header, by_k_rows),
        "",
        "![speed-up at the best static k per drafter and domain](drafters.png)",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {describe_machine(machine)}{'; ' + commit if commit else ''}; {report['date']}.",
        "",
    ]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    from specrl.plots import bar_groups

    table, config = report["table"], report["config"]
    bar_groups(
        path,
        groups=config["domains"],
        series={
            d: [table[dom]["drafters"][d]["speedup"] for dom in config["domains"]] for d in config["drafters"]
        },
        ylabel="speed-up over plain decoding (test, best k on validation)",
        title=f"Drafter pool on {report['pair']['name']}",
        reference=1.0,
    )


def write(report: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "drafters.json", json.dumps(report, indent=1) + "\n")
    write_text_atomic(out / "drafters.md", markdown(report))
    plot(report, out / "drafters.png")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    out = Path(args.out)
    if args.render:
        report = json.loads((out / "drafters.json").read_text())
        write(report, out)
        return report
    drafters, domains = args.drafters.split(","), args.domains.split(",")
    ks = [int(k) for k in args.ks.split(",")]
    pair = specrl.load_pair(preset=args.preset)
    for drafter in drafters:
        DrafterPool(pair).check(drafter)
    prompts = {
        split: {d: [pair.encode(t) for t in pair.prompts[split][d][: args.prompts]] for d in domains}
        for split in SPLITS
    }
    runs = measure(pair, prompts, drafters, ks, args.max_new_tokens, args.repeats, args.seed, args.batch)
    report = {
        "table": summarise(runs, [*drafters, POOL_RULE], domains, ks),
        "config": {"drafters": [*drafters, POOL_RULE], "domains": domains, "ks": ks, "prompts": args.prompts,
                   "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "seed": args.seed,
                   "batch": args.batch},
        "pair": pair_info(pair),
        "machine": machine_info(pair),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command_line(),
        "runs": runs,
    }  # fmt: skip
    write(report, out)
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
