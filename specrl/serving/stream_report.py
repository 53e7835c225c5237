"""What a served stream shows: summary per setup, acceptance per domain, adaptations; tables, a plot,
TensorBoard scalars under ``specdec/stream/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.tensorboard import SummaryWriter

from specrl.serving.server import Setup
from specrl.serving.spec import StreamSpec
from specrl.tables import markdown_table

#: The TensorBoard scalars of a served stream (x axis: the request index), per setup.
SCALARS = {
    "specdec/stream/tokens_per_s": "the request's new tokens / its wall time",
    "specdec/stream/acceptance_rate": "the request's accepted / proposed draft tokens",
    "specdec/stream/cumulative_tokens_per_s": "tokens so far / (decoding + adaptation time so far)",
    "specdec/stream/draft_version": "the live draft's version (0: the original)",
    "specdec/stream/adaptation_seconds": "an adaptation's wall time (at the request it followed)",
    "specdec/stream/holdout_acceptance_live": "held-back acceptance of the live draft, at an adaptation",
    "specdec/stream/holdout_acceptance_candidate": "held-back acceptance of the candidate",
    "specdec/stream/swapped": "1 when the candidate went live",
}


def summarize(setups: list[Setup], spec: StreamSpec) -> dict[str, Any]:
    """Totals per setup and segment, acceptance per domain (frozen vs adapted on the same requests),
    and every adaptation; plain data, for the JSON file and the tables."""
    segments = [segment.name for segment in spec.segments]
    rows = {}
    for setup in setups:
        adaptation_seconds = sum(a.seconds for a in setup.adaptations)
        rows[setup.name] = {
            **_totals(setup.records, adaptation_seconds),
            "adaptations": len(setup.adaptations),
            "swaps": sum(a.swapped for a in setup.adaptations),
            "segments": {
                name: _totals(
                    [r for r in setup.records if r["segment"] == name],
                    sum(
                        a.seconds
                        for a in setup.adaptations
                        if setup.records[a.after_request]["segment"] == name
                    ),
                )
                for name in segments
            },
        }
    return {
        "setups": rows,
        "domains": _domain_acceptance(setups),
        "adaptations": {s.name: [a.to_dict() for a in s.adaptations] for s in setups if s.adapts},
        "records": {s.name: s.records for s in setups},
    }


def _totals(records: list[dict], adaptation_seconds: float) -> dict[str, float]:
    tokens = sum(r["tokens"] for r in records)
    decode = sum(r["seconds"] for r in records)
    proposed = sum(r["proposed"] for r in records)
    return {
        "requests": len(records),
        "tokens": tokens,
        "decode_seconds": decode,
        "adaptation_seconds": adaptation_seconds,
        "tokens_per_s": tokens / (decode + adaptation_seconds) if records else 0.0,
        "decode_tokens_per_s": tokens / decode if decode else 0.0,
        "acceptance_rate": sum(r["accepted"] for r in records) / proposed if proposed else 0.0,
    }


def _domain_acceptance(setups: list[Setup]) -> list[dict[str, Any]]:
    """Per controller and domain: accepted / proposed of the frozen and the adapted setup, over the
    requests served before the adapted draft's first swap and over those after it (the same
    requests for both setups)."""
    rows = []
    by_name = {s.name: s for s in setups}
    for adapted in (s for s in setups if s.adapts):
        frozen = by_name.get(adapted.name.replace("adapted", "frozen", 1))
        if frozen is None:
            continue
        first_swap = next(
            (r["request"] for r in adapted.records if r["draft_version"] > 0), len(adapted.records)
        )
        for domain in sorted({r["domain"] for r in adapted.records}):
            row: dict[str, Any] = {"controller": adapted.name.split(" + ", 1)[1], "domain": domain}
            for when, span in (
                ("before", range(first_swap)),
                ("after", range(first_swap, len(adapted.records))),
            ):
                for label, setup in (("frozen", frozen), ("adapted", adapted)):
                    chosen = [setup.records[i] for i in span if setup.records[i]["domain"] == domain]
                    row[f"{label}_{when}"] = _acceptance(chosen)
                row[f"requests_{when}"] = len(chosen)
            rows.append(row)
    return rows


def _acceptance(records: list[dict]) -> float | None:
    proposed = sum(r["proposed"] for r in records)
    return sum(r["accepted"] for r in records) / proposed if proposed else None


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


class StreamScalars:
    """Writes :data:`SCALARS` for every setup to ``folder/<setup>`` (one TensorBoard run each)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.writers: dict[str, SummaryWriter] = {}

    def writer(self, setup: Setup) -> SummaryWriter:
        if setup.name not in self.writers:
            slug = setup.name.replace(" + ", "__").replace(" ", "_")
            self.writers[setup.name] = SummaryWriter(str(self.folder / slug))
        return self.writers[setup.name]

    def request(self, setup: Setup, record: dict) -> None:
        """Called after ``record`` joined ``setup.records``: the setup's logs hold everything so far."""
        w, step = self.writer(setup), record["request"]
        so_far = _totals(setup.records, sum(a.seconds for a in setup.adaptations))
        w.add_scalar("specdec/stream/tokens_per_s", record["tokens_per_s"], step)
        w.add_scalar("specdec/stream/acceptance_rate", record["acceptance_rate"], step)
        w.add_scalar("specdec/stream/cumulative_tokens_per_s", so_far["tokens_per_s"], step)
        w.add_scalar("specdec/stream/draft_version", record["draft_version"], step)

    def adaptation(self, setup: Setup, result) -> None:
        w, step = self.writer(setup), result.after_request
        w.add_scalar("specdec/stream/adaptation_seconds", result.seconds, step)
        if result.live_score is not None:
            w.add_scalar("specdec/stream/holdout_acceptance_live", result.live_score, step)
        if result.candidate_score is not None:
            w.add_scalar("specdec/stream/holdout_acceptance_candidate", result.candidate_score, step)
        w.add_scalar("specdec/stream/swapped", float(result.swapped), step)

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
