"""PNG charts for datasets and run reports (matplotlib, headless). Saved without metadata, so
the same numbers give the same bytes (a chart can sit in a dataset's checksummed files)."""

from __future__ import annotations

import io
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    _pyplot().close(fig)
    return buf.getvalue()


def pyramid_png(rl: dict, histogram: list[dict]) -> bytes:
    """Two panels: questions per pass rate (input), and achieved vs target pyramid."""
    plt = _pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.bar(
        [str(h["pass_rate"]) for h in histogram],
        [h["questions"] for h in histogram],
        color="#4a7ab5",
    )
    a.set_title("labelled questions per pass rate")
    a.set_xlabel("pass rate")
    a.tick_params(axis="x", rotation=60)
    bins = ["easy", "medium", "hard"]
    x = range(len(bins))
    b.bar(
        [i - 0.2 for i in x],
        [rl["targets"][k] for k in bins],
        width=0.4,
        label="target",
        color="#bbbbbb",
    )
    b.bar(
        [i + 0.2 for i in x],
        [rl["pyramid"][k] for k in bins],
        width=0.4,
        label="achieved",
        color="#d9822b",
    )
    b.set_xticks(list(x), bins)
    b.set_title(f"pyramid ({rl['rows']} questions)")
    b.legend()
    fig.tight_layout()
    return _png(fig)


def bars_png(title: str, labels: list[str], values: list[float], xlabel: str = "") -> bytes:
    """One horizontal bar chart (quarantine reasons, sources, duplicates)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.35 * max(3, len(labels)) + 1))
    ax.barh(labels[::-1], values[::-1], color="#4a7ab5")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    fig.tight_layout()
    return _png(fig)


def intervals_png(
    title: str, labels: list[str], values: list[float], lows: list[float], highs: list[float]
) -> bytes:
    """Horizontal bars with their confidence intervals as whiskers (one evaluation metric per
    model or slice)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.35 * max(3, len(labels)) + 1))
    err = [
        [max(0.0, v - lo) for v, lo in zip(values, lows, strict=True)][::-1],
        [max(0.0, hi - v) for v, hi in zip(values, highs, strict=True)][::-1],
    ]
    ax.barh(labels[::-1], values[::-1], xerr=err, color="#4a7ab5", capsize=3)
    ax.set_title(title)
    ax.set_xlim(0, 1)
    fig.tight_layout()
    return _png(fig)
