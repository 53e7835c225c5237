"""The page of a served stream: summary per setup, per segment, acceptance per domain, adaptations
(tables), and its plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from specrl.tables import markdown_table


def markdown(report: dict[str, Any], header: str, image: str | None = None) -> str:
    """The results page: summary, segments, acceptance per domain, adaptations; ``image``: the plot's
    path relative to the page, shown after the summary."""
    figure = [f"![acceptance and tokens/s along the stream]({image})", ""] if image else []
    return "\n".join(
        [
            header,
            "",
            *_summary_table(report),
            *figure,
            *_segment_table(report),
            *_domain_table(report),
            *_adaptation_table(report),
        ]
    )


def _summary_table(report: dict[str, Any]) -> list[str]:
    setups = report["setups"]
    plain = setups.get("plain", {}).get("tokens_per_s")
    rows = []
    for name, row in setups.items():
        frozen = setups.get(name.replace("adapted", "frozen", 1)) if name.startswith("adapted") else None
        rows.append(
            [
                name,
                row["requests"],
                row["tokens"],
                f"{row['decode_seconds']:.1f}",
                f"{row['adaptation_seconds']:.1f}",
                f"{row['tokens_per_s']:.1f}",
                f"{row['decode_tokens_per_s']:.1f}",
                f"{row['tokens_per_s'] / plain:.3f}x" if plain else "-",
                f"{row['tokens_per_s'] / frozen['tokens_per_s']:.3f}x" if frozen else "-",
                f"{row['acceptance_rate']:.3f}",
                f"{row['swaps']}/{row['adaptations']}",
            ]
        )
    header = [
        "setup",
        "requests",
        "tokens",
        "decode s",
        "adaptation s",
        "tokens/s",
        "tokens/s without adaptation",
    ]
    header += ["vs plain", "vs the frozen draft", "acceptance", "swaps/adaptations"]
    return ["## Over the whole stream (adaptation time included)", "", markdown_table(header, rows), ""]


def _segment_table(report: dict[str, Any]) -> list[str]:
    setups = report["setups"]
    names = list(next(iter(setups.values()))["segments"])
    rows = [
        [name, *(f"{row['segments'][s]['tokens_per_s']:.1f}" for s in names)] for name, row in setups.items()
    ]
    return [
        "## Tokens/s per segment (each adaptation charged to the segment it ran in)",
        "",
        markdown_table(["setup", *names], rows),
        "",
    ]


def _domain_table(report: dict[str, Any]) -> list[str]:
    rows = []
    for r in report["domains"]:
        after = r["adapted_after"], r["frozen_after"]
        change = _f(after[0] - after[1], "+.3f") if None not in after else "-"
        rows.append(
            [
                r["controller"],
                r["domain"],
                r["requests_before"],
                _f(r["frozen_before"]),
                _f(r["adapted_before"]),
            ]
            + [r["requests_after"], _f(r["frozen_after"]), _f(r["adapted_after"]), change]
        )
    header = ["controller", "domain", "requests before", "frozen", "adapted", "requests after", "frozen"]
    header += ["adapted", "change after"]
    return _section(
        "Acceptance per domain, frozen vs adapted draft on the same requests",
        "Accepted / proposed draft tokens in the stream, before the adapted draft's first swap and after it.",
        header,
        rows,
    )


def _adaptation_table(report: dict[str, Any]) -> list[str]:
    rows = []
    for name, events in report["adaptations"].items():
        for a in events:
            live, candidate = a.get("live_by_domain", {}), a.get("candidate_by_domain", {})
            per_domain = ", ".join(
                f"{d} {_f(live.get(d))} -> {_f(candidate.get(d))}" for d in sorted(set(live) | set(candidate))
            )
            rows.append(
                [name, a["after_request"], a["steps"], f"{a['seconds']:.2f}"]
                + [
                    f"{a['train_requests']}/{a['held_requests']}",
                    _f(a["live_score"]) if a["steps"] else "-",  # a skipped check: its reason says
                    _f(a["candidate_score"]),
                ]
                + [per_domain or "-", a["reason"]]
            )
    header = ["setup", "after request", "steps", "seconds", "train/held requests", "live", "candidate"]
    header += ["per domain (live -> candidate)", "outcome"]
    return _section(
        "Adaptations",
        "Held-back acceptance: greedy agreement of draft and target (expected acceptance when sampling) on "
        "the generated tokens of the window's held-back requests, which no draft trains on; the candidate "
        "goes live only when it is higher. Skipped: the live draft's acceptance on the requests since the "
        "last check was at least adapt_below.",
        header,
        rows,
    )


def _section(title: str, intro: str, header: list[str], rows: list[list]) -> list[str]:
    return [f"## {title}", "", intro, "", markdown_table(header, rows), ""]


def _f(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def rolling(values: list[float], width: int) -> np.ndarray:
    """The mean over the last ``width`` values at each index (fewer at the start)."""
    array = np.asarray(values, dtype=float)
    sums = np.cumsum(np.insert(array, 0, 0.0))
    index = np.arange(1, len(array) + 1)
    start = np.maximum(0, index - width)
    return (sums[index] - sums[start]) / (index - start)


def segment_spans(records: list[dict]) -> list[tuple[int, int, str]]:
    """(first request, last request + 1, name) of each segment, in order."""
    spans: list[tuple[int, int, str]] = []
    for r in records:
        if spans and spans[-1][2] == r["segment"]:
            spans[-1] = (spans[-1][0], r["request"] + 1, r["segment"])
        else:
            spans.append((r["request"], r["request"] + 1, r["segment"]))
    return spans


def cumulative_tokens_per_s(records: list[dict], adaptations: list[dict]) -> np.ndarray:
    """Tokens so far / (decoding + adaptation time so far), at every request."""
    extra = np.zeros(len(records))
    for a in adaptations:
        extra[a["after_request"]] += a["seconds"]
    tokens = np.cumsum([r["tokens"] for r in records])
    seconds = np.cumsum([r["seconds"] for r in records]) + np.cumsum(extra)
    return tokens / seconds


def plot(report: dict[str, Any], path: Path, width: int = 6) -> Path:
    """Acceptance, tokens/s (rolling means over ``width`` requests) and the cumulative tokens/s with
    adaptation time against the request index; segments shaded and named, swaps marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from specrl.plots import save_figure

    records = report["records"]
    fig, axes = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    spans = segment_spans(next(iter(records.values())))
    for ax in axes:
        for i, (start, stop, _name) in enumerate(spans):
            ax.axvspan(start - 0.5, stop - 0.5, color="0.93" if i % 2 == 0 else "0.85", zorder=0)
    for start, stop, name in spans:
        axes[0].text(
            (start + stop) / 2, 1.02, name, ha="center", va="bottom", transform=axes[0].get_xaxis_transform()
        )
    colors = plt.get_cmap("tab10")
    for i, (name, rows) in enumerate(records.items()):
        x = [r["request"] for r in rows]
        style = {"color": colors(i), "label": name, "linestyle": "-" if name.startswith("adapted") else "--"}
        if name != "plain":
            axes[0].plot(x, rolling([r["acceptance_rate"] for r in rows], width), **style)
        axes[1].plot(x, rolling([r["tokens_per_s"] for r in rows], width), **style)
        events = report["adaptations"].get(name, [])
        cumulative = cumulative_tokens_per_s(rows, events)
        axes[2].plot(x, cumulative, **style)
        for a in events:
            if a["steps"] == 0:  # a check that left the draft alone
                continue
            at = a["after_request"]
            axes[2].plot(
                [at], [cumulative[at]], marker="v" if a["swapped"] else "x", color=colors(i), markersize=8
            )
    axes[0].set_ylabel(f"acceptance rate\n(mean of {width} requests)")
    axes[1].set_ylabel(f"tokens/s\n(mean of {width} requests)")
    axes[2].set_ylabel("cumulative tokens/s\n(adaptation time included)")
    axes[2].set_xlabel(
        "request index   (v: an adaptation swapped in, x: one rejected; checks that skipped: unmarked)"
    )
    axes[1].legend(loc="upper left", fontsize=8, ncol=len(records))
    fig.tight_layout()
    return save_figure(fig, path)
