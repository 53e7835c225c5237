"""The GPU check's summary page, ``gpu_check.md``: the machine, a line per stage, and per scenario
the benchmark's tokens/s on the test prompts."""

from __future__ import annotations

from specrl.evaluation.report import number, ratio
from specrl.tables import markdown_table


def render_markdown(report: dict) -> str:
    """The page of a :class:`~gpu_check_parts.record.Record`'s report."""
    stages = report["stages"]
    env = stages.get("environment", {}).get("result", {})
    machine = env.get("gpu") or f"{env.get('device', '?')} ({env.get('cpus', '?')} CPUs)"
    lines = [
        "# GPU check" + (" (smoke run: shrunk budgets, numbers mean nothing)" if report["smoke"] else ""),
        "",
        f"{report['date']}, `{report['command']}`. Machine: {machine}"
        + (f", {env['gpu_memory_gib']} GiB" if "gpu_memory_gib" in env else "")
        + f"; torch {env.get('torch')} (CUDA {env.get('cuda')}), transformers {env.get('transformers')}, "
        f"commit {env.get('commit')}.",
        "",
        f"Total {report['seconds']:.0f} s"
        + (
            f" (aim: {report['aim_seconds']} s on one H200)" if "lossless" in stages else ""
        )  # not --vllm-only
        + "; "
        + ("every stage passed." if report["passed"] else "NOT every stage passed."),
        "",
        markdown_table(
            ["stage", "status", "seconds", "result"],
            [[name, s["status"], f"{s['seconds']:.1f}", stage_line(name, s)] for name, s in stages.items()],
        ),
    ]
    bench = stages.get("benchmark", {}).get("result")
    for scenario, rows in (bench or {}).get("headline", {}).items():
        lines += [
            "",
            f"## {scenario}: tokens/s on the test prompts",
            "",
            f"Real loop: wall clock, median of {report['budget']['repeats']} repeats, "
            f"{report['budget']['episodes']} episode(s); simulator: modeled time ({bench.get('latency')}). "
            f"Every row: {bench['folder']}/results.md.",
            "",
            markdown_table(
                ["controller", "real tok/s", "vs plain", "vs TCP", "acceptance", "sim tok/s"],
                [
                    [
                        row["label"],
                        number(row["real_tokens_per_s"], 1),
                        ratio(row["speedup"]),
                        ratio(row["ratio_to_tcp"]),
                        number(row["acceptance_rate"], 3),
                        number(row["sim_tokens_per_s"], 1),
                    ]
                    for row in rows
                ],  # fmt: skip
            ),
        ]
    return "\n".join(lines) + "\n"


def stage_line(name: str, stage: dict) -> str:
    """One cell: what the stage found."""
    if "result" not in stage:
        return (stage.get("error") or stage.get("reason") or "").replace("|", "\\|").replace("\n", " ")
    r = stage["result"]
    if name == "environment":
        return f"{r.get('gpu') or r['device']}, torch {r['torch']}, CUDA {r['cuda']}"
    if name == "lossless":
        g, s, b = (r["checks"][c] for c in ("greedy_float32", "sampling_float32", "greedy_bfloat16"))
        return (
            f"greedy float32: {'equal' if g['all_equal'] else 'UNEQUAL'} in {g['runs']} runs "
            f"(accepts and rejects: {g['accepts_and_rejects']}); chi-square of {s['samples']} samples: "
            f"min p {s['min_p_value']:.3g}; bf16 (information): {b['mean_agree']:.1f} of {b['tokens']} "
            f"tokens agree on average (min {b['min_agree']})"
        )
    if name == "build":
        budget, parameters = r.get("budget") or {}, r["parameters"]
        steps = ", ".join(
            f"{model} {done}/{budget['planned_steps'][model]}"
            for model, done in budget.get("steps", {}).items()
        )
        return (
            ("reused; " if r["reused"] else "")
            + f"target {parameters['target'] / 1e6:.3g}M, draft {parameters['draft'] / 1e6:.3g}M parameters; "
            + (
                f"steps {steps}, cap {budget['max_seconds']:.0f} s {'hit' if budget['hit'] else 'not hit'}; "
                if steps
                else ""
            )  # fmt: skip
            + f"greedy agreement ({r['dtype']}): {r['greedy_agreement']['mean_agree']:.1f} of "
            f"{r['greedy_agreement']['tokens']} tokens on average"
        )
    if name == "calibrate":
        return (
            f"target {r['target_ms_1_token_context_256']} ms (1 token), "
            f"draft {r['draft_ms_context_256']} ms; plain {r['plain_tokens_per_s']} tok/s modeled"
        )
    if name == "policy":
        validation = number(r["ratio_vs_tcp_sim_validation"], 3)
        return f"{r['timesteps']} PPO steps; ratio vs TCP on validation traces (simulator) {validation}"
    if name == "benchmark":
        return f"{sum(len(rows) for rows in r['headline'].values())} rows in {r['folder']}"
    return r.get("summary") or r.get("folder", "")
