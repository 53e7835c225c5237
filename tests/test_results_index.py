"""results/README.md: every section's files exist, and every link of the README into it lands on a heading."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def results_index():
    spec = importlib.util.spec_from_file_location("results_index", REPO / "experiments" / "results_index.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_index"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_section_names_files_that_exist():
    index = results_index()
    for section in index.SECTIONS:
        for file in (*section.files, *([section.notes] if section.notes else [])):
            assert (REPO / file).is_file(), f"{section.title}: {file} is missing"
        assert section.command.startswith("python "), section.command


def test_readme_links_into_the_results_page_land_on_its_headings():
    index = results_index()
    page = index.render()
    anchors = {index.anchor(heading) for heading in re.findall(r"^#+ (.+)$", page, flags=re.M)}
    links = re.findall(r"\(results/README\.md#([^)]+)\)", (REPO / "README.md").read_text())
    assert links, "the README links no section of results/README.md"
    missing = sorted(set(links) - anchors)
    assert not missing, f"README links to missing sections of results/README.md: {missing}"


def test_included_pages_nest_under_their_section_and_keep_their_links():
    index = results_index()
    assert index.demote("# Title\n\n## Part\ntext") == "### Title\n\n#### Part\ntext"
    rebased = index.rebase_links(
        "![plot](tokens_per_s.png) [web](https://x.org) [here](#a)", "results/evaluate/run/results.md"
    )
    assert rebased == "![plot](evaluate/run/tokens_per_s.png) [web](https://x.org) [here](#a)"
    assert (
        index.rebase_links("[r](results.md)", "policies/default/results.md")
        == "[r](../policies/default/results.md)"
    )
