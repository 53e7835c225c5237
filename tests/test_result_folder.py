"""experiments/benchmarks/result_folder.py: the README.md a script writes into its result folder
(what was measured, the command, the commit, the machine, the tables and plots), one section per
run, rewritten atomically. The helper runs as the scripts run it, with ``experiments/`` on the path,
in a subprocess: the tests never import experiments code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.xdist_group("result_folder")  # one worker: the helper's subprocess runs once

MACHINE = {
    "device": "cpu",
    "dtype": "float32",
    "cpu_count": 2,
    "processor": "x86_64",
    "torch": "2.13.0",
    "transformers": "5.19.0",
    "python": "3.11",
    "git": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": True},
}

# write_readme(folder, Run(**run)) for each step of a JSON list on stdin, in one process (the
# helper's imports take seconds); a step with "fail" has os.replace refuse, as a full disk would
WRITE = """
import json, os, sys
from pathlib import Path
from benchmarks import result_folder
from benchmarks.result_folder import Run, write_readme
results, steps = json.load(sys.stdin)
result_folder.RESULTS = Path(results)
rename = os.replace
for folder, run, fail in steps:
    if fail:
        os.replace = lambda *args: (_ for _ in ()).throw(OSError("disk full"))
    try:
        write_readme(folder, Run(**run))
    except OSError as error:
        print(f"refused: {error}")
    os.replace = rename
"""


def run(table: str, command: str = "python experiments/bench_x.py") -> dict:
    return {
        "title": f"Runs of {table}",
        "measured": f"What {table} measured.",
        "command": command,
        "machine": MACHINE,
        "tables": [f"{table}.md"],
        "data": [f"{table}.json"],
        "plots": [f"{table}.png"],
    }


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    """The folders after every step: a new README outside results/; a study folder of results/ with
    a hand-written README and notes.md, written by a run below it (``--out results/study/sub``),
    by another run, by the first again; a README whose rewrite fails."""
    tmp = tmp_path_factory.mktemp("readmes")
    alone, study, failing = tmp / "elsewhere", tmp / "results" / "study", tmp / "failing"
    study.mkdir(parents=True)
    (study / "README.md").write_text(
        "# A study\n\nWhat the folder holds.\n\n## Hand-named heading\n\nOld.\n\n"
        "- Command: `old`\n- Tables: [`sub/a.md`](sub/a.md), [`b.md`](b.md)\n"
    )
    (study / "notes.md").write_text("# Findings\n")
    failing.mkdir()
    (failing / "README.md").write_text("# Old\n")
    steps = [
        (alone, run("bench"), False),
        (study / "sub", run("a", "new a"), False),
        (study, run("c"), False),
        (study / "sub", run("a", "newer"), False),
        (failing, run("bench"), True),
    ]
    payload = json.dumps([str(tmp / "results"), [(str(folder), r, fail) for folder, r, fail in steps]])
    env = os.environ | {"PYTHONPATH": str(REPO / "experiments")}
    done = subprocess.run(
        [sys.executable, "-c", WRITE], input=payload, text=True, capture_output=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "refused: disk full\n"
    return {"alone": alone, "study": study, "failing": failing}


def test_the_readme_says_the_command_commit_machine_and_links_the_tables_and_plots(written):
    assert (written["alone"] / "README.md").read_text() == (
        "# Runs of bench\n\nWhat bench measured.\n\n"
        "- Command: `python experiments/bench_x.py`\n"
        "- Commit: 0123456-dirty\n"  # the run's recorded commit, not the checkout's now
        "- Machine: cpu (float32), 2 CPUs (x86_64), torch 2.13.0, transformers 5.19.0, Python 3.11\n"
        "- Tables: [`bench.md`](bench.md)\n"
        "- Data: [`bench.json`](bench.json)\n\n"
        "![bench](bench.png)\n"
    )


def test_each_run_is_a_section_a_rerun_replaces_its_own_and_the_findings_are_linked(written):
    study = written["study"]
    text = (study / "README.md").read_text()
    assert text.startswith("# A study\n\nWhat the folder holds.\n\n## Hand-named heading\n\nWhat a measured.")
    assert "- Command: `newer`" in text and "`new a`" not in text and "`old`" not in text
    assert "- Tables: [`sub/a.md`](sub/a.md)\n" in text and "![a](sub/a.png)" in text
    assert text.count("## ") == 3  # the rerun replaced its section: hand-named, c's, the findings
    assert "\n## Runs of c\n\nWhat c measured." in text
    assert text.endswith("## Findings\n\nWritten by hand: [`notes.md`](notes.md).\n")
    assert sorted(path.name for path in study.iterdir()) == ["README.md", "notes.md"]


def test_a_write_that_fails_leaves_the_old_readme_and_no_temporary_file(written):
    assert (written["failing"] / "README.md").read_text() == "# Old\n"
    assert [path.name for path in written["failing"].iterdir()] == ["README.md"]


def test_a_run_writes_its_page_its_data_and_its_readme_section_in_one_call(tmp_path):
    script = (
        "import sys; from pathlib import Path; from benchmarks.result_folder import write_result; "
        "write_result(Path(sys.argv[1]), 'check', '# Check\\n', {'ratio': 1.5}, title='A check', "
        "measured='What the check measured.', command='python experiments/check.py', machine='x86_64')"
    )
    env = os.environ | {"PYTHONPATH": str(REPO / "experiments")}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert (out / "check.md").read_text() == "# Check\n"
    assert json.loads((out / "check.json").read_text()) == {"ratio": 1.5}
    readme = (out / "README.md").read_text()
    assert "What the check measured." in readme and "[`check.md`](check.md)" in readme
    assert "[`check.json`](check.json)" in readme and "`python experiments/check.py`" in readme
