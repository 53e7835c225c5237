"""results/README.md (specrl/evaluation/results_index/): every section's files exist, and every
link of the README into it lands on a heading."""

from __future__ import annotations

import re
from pathlib import Path

from specrl.evaluation.results_index import SECTIONS, anchor, demote, rebase_links, render

REPO = Path(__file__).resolve().parent.parent


def test_every_section_names_files_that_exist():
    for section in SECTIONS:
        for file in (*section.files, *([section.notes] if section.notes else [])):
            assert (REPO / file).is_file(), f"{section.title}: {file} is missing"
        assert section.command.startswith("python "), section.command


def test_readme_links_into_the_results_page_land_on_its_headings():
    page = render(repo=REPO)
    anchors = {anchor(heading) for heading in re.findall(r"^#+ (.+)$", page, flags=re.M)}
    links = re.findall(r"\(results/README\.md#([^)]+)\)", (REPO / "README.md").read_text())
    assert links, "the README links no section of results/README.md"
    missing = sorted(set(links) - anchors)
    assert not missing, f"README links to missing sections of results/README.md: {missing}"


def test_included_pages_nest_under_their_section_and_keep_their_links():
    assert demote("# Title\n\n## Part\ntext") == "### Title\n\n#### Part\ntext"
    rebased = rebase_links(
        "![plot](tokens_per_s.png) [web](https://x.org) [here](#a)", "results/evaluate/run/results.md"
    )
    assert rebased == "![plot](evaluate/run/tokens_per_s.png) [web](https://x.org) [here](#a)"
    assert (
        rebase_links("[r](results.md)", "policies/default/results.md")
        == "[r](../policies/default/results.md)"
    )
