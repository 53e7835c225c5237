"""How one result file appears in ``results/README.md``: a markdown page with its headings nested
under its section and its links made relative to ``results/``, or a table rendered from a JSON
file (the zoo pair's card, run_controller.py's results)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from specrl.provenance import CHECKOUT
from specrl.tables import markdown_table

#: JSON files shown as a table (rendered here); every other shown file is a markdown page.
RENDERED = ("card.json", "run_controller.json")


def shown(file: str) -> bool:
    """Whether ``file`` is a page the index shows (the others are linked only)."""
    return file.endswith(".md") or Path(file).name in RENDERED


def page(file: str, repo: Path = CHECKOUT) -> str:
    """The body shown for one result file (a path in the repository ``repo``)."""
    path = repo / file
    if path.name == "card.json":
        return zoo_card_markdown(path)
    if path.name == "run_controller.json":
        return controllers_markdown(path)
    return rebase_links(demote(path.read_text().strip()), file)


def zoo_card_markdown(card_path: Path) -> str:
    """A table of the shipped pair's sizes, held-out losses and agreement, from its card.json."""
    card = json.loads(card_path.read_text())
    built = card["built_with"]
    lines = [
        f"Built by `{card['command']}` in {built['seconds'] / 60:.0f} min on {built['machine']} "
        f"({built['device']}, torch {built['torch']}, Python {built['python']}); {card['corpus']}.",
        f"Target {card['parameters']['target'] / 1e6:.1f}M parameters, draft "
        f"{card['parameters']['draft'] / 1e6:.1f}M (trained on {', '.join(card['draft_trained_on'])}).",
        "",
        markdown_table(
            ["held-out domain", "target loss", "draft loss", "greedy agreement (argmax q = argmax p)"],
            [
                [domain, f"{row['target_loss']:.3f}", f"{row['draft_loss']:.3f}", f"{row['agreement']:.3f}"]
                for domain, row in card["heldout"].items()
            ],
        ),
    ]
    mid = card.get("draft-mid")
    if mid:
        lines += [
            "",
            f"The mid draft (`draft-mid`, the drafter pool's second draft and the cascade's upper stage): "
            f"{mid['parameters'] / 1e6:.1f}M parameters, {mid['shape']['layers']} layers of "
            f"{mid['shape']['hidden']}, distilled like the draft for {mid['steps']} steps "
            f"({mid['precision']}) in {mid['seconds'] / 60:.0f} min by `{mid['command']}`.",
            "",
            markdown_table(
                ["held-out domain", "mid loss", "greedy agreement with the target"],
                [
                    [d, f"{row['draft_loss']:.3f}", f"{row['agreement']:.3f}"]
                    for d, row in mid["heldout"].items()
                ],
            ),
        ]
    return "\n".join(lines)


def controllers_markdown(results_json: Path) -> str:
    """Scenario x controller tokens/sec (ratio to plain) from run_controller.py's --json output."""
    results = json.loads(results_json.read_text())
    controllers = list(next(iter(results.values()))["controllers"])
    lines = []
    for scenario, result in results.items():
        rows = result["controllers"]
        plain = rows[controllers[0]]["tokens_per_s"]
        speeds = [rows[c]["tokens_per_s"] for c in controllers]
        lines.append([scenario, *(f"{speed:.0f} ({speed / plain:.2f}x)" for speed in speeds)])
    return markdown_table(["scenario", *controllers], lines)


def demote(markdown: str, levels: int = 2) -> str:
    """Headings of an included page, ``levels`` deeper, so they nest under the section's."""
    return re.sub(r"^(#+) ", lambda m: "#" * min(6, len(m.group(1)) + levels) + " ", markdown, flags=re.M)


def rebase_links(markdown: str, file: str) -> str:
    """Relative links and images of ``file``'s page, made relative to ``results/``."""
    folder = relative(str(Path(file).parent))
    return re.sub(r"\]\((?!https?:|#|/)([^)]+)\)", lambda m: f"]({folder}/{m.group(1)})", markdown)


def relative(file: str) -> str:
    """A repository path as a link from ``results/README.md``."""
    return file[len("results/") :] if file.startswith("results/") else f"../{file}"
