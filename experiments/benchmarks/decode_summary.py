"""``experiments/bench_decode.py``'s table rows: per configuration and domain, tokens/s (median over
repeats of the domain's tokens over its seconds), the paired ratio to ours plain with its 95% interval and n,
acceptance, tokens per verification, and whether greedy outputs equal ours plain's."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from benchmarks.decode import Config
from specrl.evaluation.intervals import paired_ratio_interval
from specrl.evaluation.records import (
    acceptance_rate,
    median_speed,
    paired_speeds,
    speed_per_repeat,
    speedup,
)
from specrl.hf_assisted import resolved_assistant_settings

TOKENS = "new_tokens"  # the records' token count


def summarize_cell(records: list[dict], plain: list[dict]) -> dict:
    """One configuration on one domain against ours plain on the same prompts."""
    median, plain_median = median_speed(records, TOKENS), median_speed(plain, TOKENS)
    tokens = sum(r[TOKENS] for r in records)
    cell = {
        "tokens_per_s": median,
        "tokens_per_s_repeats": list(speed_per_repeat(records, TOKENS).values()),
        "ratio_vs_plain": median / plain_median if plain_median else None,
        "ratio_vs_plain_paired_median": speedup(records, plain, TOKENS),
        **paired_ratio_interval(*paired_speeds(records, plain, TOKENS)).as_json("ratio_vs_plain"),
        "tokens_per_verify": tokens / max(1, sum(r["verifies"] for r in records)),
        "draft_forwards_per_token": sum(r["draft_forwards"] for r in records) / max(1, tokens),
        "runs": len(records),
    }
    if "proposed" in records[0]:
        cell["acceptance_rate"] = acceptance_rate(records)
    if "matches_plain" in records[0]:
        cell["matches_plain"] = all(r["matches_plain"] for r in records)
    return cell


def summarize(configs: Sequence[Config], records: list[dict], domains: Sequence[str]) -> list[dict]:
    """One row per configuration: its cells per domain and over all ("all")."""
    rows = []
    for config in configs:

        def select(key: str, domain: str | None, t: float = config.temperature) -> list[dict]:
            return [r for r in records if r["config"] == key and r["temperature"] == t
                    and (domain is None or r["domain"] == domain)]  # fmt: skip

        cells = {}
        for domain in [*domains, "all"]:
            only = None if domain == "all" else domain
            cells[domain] = summarize_cell(select(config.key, only), select("ours-plain", only))
        row = {"key": config.key, "label": config.label, "engine": config.engine, "k": config.k,
               "temperature": config.temperature, "domains": cells}  # fmt: skip
        if config.assistant is not None:
            row["assistant_generation_config"] = resolved_assistant_settings(config.assistant)
        if config.temperature == 0 and config.key != "ours-plain":
            row["matches_plain"] = all(cell["matches_plain"] for cell in cells.values())
        rows.append(row)
    return rows


def warn_mismatches(rows: list[dict]) -> None:
    """A warning for every greedy row whose output differs from ours plain's, saying why it may."""
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
