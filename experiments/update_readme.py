"""Paste generated markdown into README.md between ``<!-- NAME -->`` and ``<!-- /NAME -->``.

    python experiments/update_readme.py BENCH results/bench_decode/specrl-zoo-small/bench.md
    python experiments/update_readme.py ZOO-CARD --zoo-card small
    python experiments/update_readme.py CONTROLLERS --controllers-json results/run_controller.json
    python experiments/update_readme.py EVALUATION --evaluation results/evaluate/<run>

Keeps README numbers identical to what the scripts wrote; run it after regenerating them.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from specrl.tables import markdown_table

README = Path(__file__).resolve().parent.parent / "README.md"


def zoo_card_markdown(preset: str) -> str:
    """A table of the shipped pair's sizes, held-out losses and agreement, from its card.json."""
    from specrl.zoo.build import shipped_dir

    card = json.loads((shipped_dir(preset) / "card.json").read_text())
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


def evaluation_markdown(run: Path) -> str:
    """The header and summary of an evaluate.py run's results.md (everything above the per-scenario
    tables), with where the full tables are."""
    from specrl.evaluation.report import readme_block

    results_md = run / "results.md" if run.is_dir() else run
    block = readme_block(results_md.read_text())
    try:
        where = results_md.resolve().relative_to(README.parent)
    except ValueError:
        where = results_md
    return f"{block}\nPer-scenario tables, plots and raw numbers: `{where.parent}/`.\n"


def paste(name: str, text: str) -> None:
    readme = README.read_text()
    block = f"<!-- {name} -->\n{text.strip()}\n<!-- /{name} -->"
    pattern = re.compile(rf"<!-- {re.escape(name)} -->.*?(<!-- /{re.escape(name)} -->|$)", re.S)
    if f"<!-- {name} -->" not in readme:
        raise SystemExit(f"README.md has no <!-- {name} --> marker")
    if f"<!-- /{name} -->" in readme:
        readme = pattern.sub(lambda _: block, readme, count=1)
    else:
        readme = readme.replace(f"<!-- {name} -->", block, 1)
    README.write_text(readme)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", help="marker name, e.g. BENCH")
    parser.add_argument("markdown", nargs="?", help="markdown file to paste")
    parser.add_argument("--zoo-card", metavar="PRESET", help="paste the shipped pair's card as a table")
    parser.add_argument(
        "--controllers-json",
        type=Path,
        metavar="FILE",
        help="paste run_controller.py's --json results as a scenario x controller table",
    )
    parser.add_argument(
        "--evaluation",
        type=Path,
        metavar="RUN",
        help="paste the summary of evaluate.py's results.md (a run folder or the file)",
    )
    args = parser.parse_args()
    if args.zoo_card:
        text = zoo_card_markdown(args.zoo_card)
    elif args.controllers_json:
        text = controllers_markdown(args.controllers_json)
    elif args.evaluation:
        text = evaluation_markdown(args.evaluation)
    else:
        text = Path(args.markdown).read_text()
    paste(args.name, text)


if __name__ == "__main__":
    main()
