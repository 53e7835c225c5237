"""What ``experiments/results_index.py`` writes: ``results/README.md``, every generated result
page of the repository in one place. It only collects: a section's command refreshes its numbers.

- :mod:`.sections`: the sections (title, what, command, files, notes);
- :mod:`.pages`: how one file appears (a page nested under its section, or a table from JSON);
- :mod:`.index`: the whole page.
"""

from specrl.evaluation.results_index.index import anchor, render
from specrl.evaluation.results_index.pages import demote, rebase_links
from specrl.evaluation.results_index.sections import SECTIONS, Section

__all__ = ["SECTIONS", "Section", "anchor", "demote", "rebase_links", "render"]
