"""experiments/results_index.py: results/README.md lists every result folder by its own README.md
(first heading, first sentence), linked and sorted; the committed index is the one it writes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "experiments" / "results_index.py"


def index(results: Path) -> str:
    subprocess.run([sys.executable, str(SCRIPT), "--results", str(results)], check=True, capture_output=True)
    return (results / "README.md").read_text()


def test_the_index_lists_each_folder_by_its_readme_sorted_and_linked(tmp_path):
    pages = {
        "zeta": "# Zeta study\n\nIt measured zeta. Then more [here](z.md).\n\n## Part\n\nNot shown.\n",
        "alpha": "Preamble.\n\n# Alpha: a title\n\nOne sentence, on\ntwo lines (a [table](t.md)). More.\n",
        "mid": "# Mid\n",
    }
    for folder, text in pages.items():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "README.md").write_text(text)
    (tmp_path / "no_readme").mkdir()
    (tmp_path / "loose.md").write_text("# Not a folder\n")
    lines = [line for line in index(tmp_path).splitlines() if line.startswith("- ")]
    assert lines == [
        "- [Alpha: a title](alpha/README.md) (`alpha/`): One sentence, on two lines (a [table](alpha/t.md)).",
        "- [Mid](mid/README.md) (`mid/`)",
        "- [Zeta study](zeta/README.md) (`zeta/`): It measured zeta.",
    ]


def test_every_result_folder_describes_itself_and_the_committed_index_is_current(tmp_path):
    results = REPO / "results"
    folders = sorted(path.name for path in results.iterdir() if path.is_dir())
    missing = [name for name in folders if not (results / name / "README.md").is_file()]
    assert not missing, f"result folders without a README.md: {missing}"
    for name in folders:
        (tmp_path / name).mkdir()
        shutil.copy(results / name / "README.md", tmp_path / name / "README.md")
    text = index(tmp_path)
    assert len(text.splitlines()) <= 200
    assert re.findall(r"^- \[[^\]]+\]\(([^)]+)/README\.md\)", text, flags=re.M) == folders
    for target in re.findall(r"\]\(([^)#\s]+)", text):
        assert (results / target).exists(), f"results/README.md links to a missing {target}"
    assert text == (results / "README.md").read_text(), "rerun python experiments/results_index.py"
