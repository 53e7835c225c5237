"""Write ``results/README.md``: every generated result page of the repository in one place.

Each section names what it measures, the command that produced it, when (the commit that last
changed its files) and where the files are, then shows the page itself. The README quotes a few
headline numbers and links here; the full tables live here and in the linked pages.

    python experiments/results_index.py            # results/README.md

It only collects: rerun the command of a section to refresh its numbers, then rerun this. The
sections are listed in specrl/evaluation/results_index/sections.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specrl.evaluation.results_index import render
from specrl.io import write_text_atomic

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "results" / "README.md", help="page to write")
    args = parser.parse_args()
    write_text_atomic(args.out, render(repo=REPO))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
