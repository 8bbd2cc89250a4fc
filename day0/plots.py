"""Plots for reports, rendered headless (Agg) to PNG bytes."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["Band", "grouped_bars", "line_overlay"]


class Band(NamedTuple):
    """A shaded range around a curve (e.g. the reference's noise band)."""

    label: str
    xs: Sequence[float]
    low: Sequence[float]
    high: Sequence[float]


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def grouped_bars(
    title: str, categories: Sequence[str], series: Mapping[str, Sequence[float]], ylabel: str, log: bool = False
) -> bytes:
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        ax.bar([x + i * width for x in range(len(categories))], values, width, label=label)
    ax.set_xticks(
        [x + width * (len(series) - 1) / 2 for x in range(len(categories))], categories, rotation=30, ha="right"
    )
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _png(fig)


def line_overlay(
    title: str,
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    xlabel: str,
    ylabel: str,
    *,
    bands: Sequence[Band] = (),
    mark_x: float | None = None,
) -> bytes:
    """Curves over each other, `bands` shaded beneath them (widest first), a dashed line at `mark_x`."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, band in enumerate(bands):
        ax.fill_between(band.xs, band.low, band.high, alpha=0.18 + 0.12 * i, color="grey", label=band.label, lw=0)
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, label=label)
    if mark_x is not None:
        ax.axvline(mark_x, color="red", ls="--", lw=1, label=f"curves part ({xlabel} {mark_x:g})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return _png(fig)
