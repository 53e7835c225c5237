"""The record of a GPU check: its stages in order, each with its status, seconds and result, in
``<out>/gpu_check.json`` and ``<out>/gpu_check.md``, both rewritten after every stage so that an
interrupted run keeps what it did."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.result_folder import Run, write_readme

from gpu_check_parts.budgets import AIM_SECONDS
from gpu_check_parts.page import render_markdown
from specrl.io import write_report
from specrl.provenance import command_line


class Record:
    """The run's stages in order, each with its status, seconds and result; written after each.

    Args:
        out: the folder of ``gpu_check.json`` and ``gpu_check.md``.
        smoke: whether the budgets are the shrunk ones (the page says its numbers mean nothing).
        budget: the run's budget (:func:`~gpu_check_parts.budgets.resolve_budget`).
        scenarios: the scenarios the policy trains on and the benchmark runs.
    """

    def __init__(self, out: Path, smoke: bool, budget: dict[str, Any], scenarios: list[str]) -> None:
        self.out, self.started = out, time.perf_counter()
        self.report: dict[str, Any] = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": command_line(),
            "smoke": smoke,
            "budget": {k: list(v) if isinstance(v, tuple) else v for k, v in budget.items()},
            "scenarios": scenarios,
            "aim_seconds": AIM_SECONDS,
            "stages": {},
        }

    def stage(self, name: str, run: Callable[[], dict], needs: tuple[str, ...] = ()) -> dict | None:
        """Run one stage; an exception fails it (its message recorded), and a stage whose ``needs``
        did not pass is skipped. Returns the stage's result, or None."""
        missing = [n for n in needs if self.report["stages"].get(n, {}).get("status") != "ok"]
        if missing:
            entry = {"status": "skipped", "seconds": 0.0, "reason": f"needs {', '.join(missing)}"}
        else:
            print(f"\n== {name} (at {self.elapsed():.0f} s)", flush=True)
            started = time.perf_counter()
            try:
                result = run()
                status = "ok" if result.get("passed", True) is not False else "failed"
                entry = {"status": status, "result": result}
            except (Exception, SystemExit) as error:  # noqa: BLE001 - recorded, then the next stage
                entry = {"status": "failed", "error": f"{type(error).__name__}: {error}"}
            entry["seconds"] = round(time.perf_counter() - started, 1)
        self.report["stages"][name] = entry
        print(f"== {name}: {entry['status']} in {entry['seconds']:.1f} s (total {self.elapsed():.0f} s)")
        if "error" in entry or "reason" in entry:
            print(f"   {entry.get('error') or entry.get('reason')}")
        self.write()
        return entry.get("result")

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def write(self) -> None:
        self.report["seconds"] = round(self.elapsed(), 1)
        self.report["passed"] = all(s["status"] == "ok" for s in self.report["stages"].values())
        write_report(self.out / "gpu_check", self.report, render_markdown(self.report))
        env = self.report["stages"].get("environment", {}).get("result") or {}
        names = ("gpu", "device", "cpus", "torch", "cuda", "transformers", "python")
        machine = ", ".join(f"{name} {env[name]}" for name in names if env.get(name)) or "not recorded"
        measured = (
            "On one GPU: whether specrl is lossless there (greedy equality, the law of the first sampled "
            "tokens), an embedded pair built and calibrated on the device, a quick policy trained, and "
            "every controller benchmarked in the real loop and the simulator; each stage timed."
            + (" A smoke run: every budget shrunk, its numbers mean nothing." if self.report["smoke"] else "")
        )
        run = Run("One GPU: lossless, and what speculation buys", measured, self.report["command"], machine,
                  ["gpu_check.md"], ["gpu_check.json"], commit=env.get("commit"))  # fmt: skip
        write_readme(self.out, run)
