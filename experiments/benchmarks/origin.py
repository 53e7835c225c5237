"""Where a benchmark's result came from: what its report records of the run (:func:`result_origin`)
and the lines its page writes of it."""

from __future__ import annotations

import datetime

from specrl.evaluation.machine import machine_info
from specrl.models import ModelPair
from specrl.provenance import command_line, describe_machine, short_commit


def describe_commit(machine: dict) -> str | None:
    """``commit <short hash>`` of a report's ``machine`` (:func:`specrl.provenance.short_commit`);
    None when unknown."""
    commit = short_commit(machine.get("git"))
    return f"commit {commit}" if commit else None


def result_origin(pair: ModelPair) -> dict:
    """What a result file records of the run that made it: machine, date (UTC) and command."""
    return {
        "machine": machine_info(pair),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command_line(),
    }


def origin_line(report: dict) -> str:
    """A result page's last line: the command, date, machine and commit of ``report``'s run."""
    commit = describe_commit(report["machine"])
    return (
        f"Command: `{report['command']}`. Date: {report['date']}. "
        f"Machine: {describe_machine(report['machine'])}{'; ' + commit if commit else ''}"
    )
