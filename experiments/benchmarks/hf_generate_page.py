"""``experiments/bench_hf_generate.py``'s page: per row tokens/s (per domain and over all), the ratio
to ``hf plain``, tokens per target forward, acceptance and whether outputs equal ``hf plain``'s."""

from __future__ import annotations

from pathlib import Path

from benchmarks.origin import describe_commit
from benchmarks.result_folder import Run, write_readme
from specrl.io import write_report
from specrl.provenance import describe_machine
from specrl.tables import markdown_table


def markdown(report: dict, command: str) -> str:
    """``hf_generate.md`` of a report from :func:`benchmarks.hf_generate.run`."""
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
    """``stem.json`` (the report with its ``command``) and ``stem.md``."""
    report = {**report, "command": command}
    write_report(stem, report, markdown(report, command))
    stem = Path(stem)
    measured = (
        "specrl's controllers inside Hugging Face `generate` "
        "(`custom_generate=specrl.hf.speculative_generate`) against HF's own assisted generation, same "
        "pair and prompts; every output checked equal to plain `generate`."
    )
    files = [f"{stem.name}.md"], [f"{stem.name}.json"]
    write_readme(stem.parent, Run("specrl inside HF generate", measured, command, report["machine"], *files))
