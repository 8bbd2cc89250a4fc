"""Plots for reports, rendered headless (Agg) to PNG bytes.

`line_overlay` puts curves of one unit on one axis; `panels` gives each quantity its own axis (its
own unit and scale: TTFT in seconds beside TPOT in milliseconds, a loss beside its relative error),
so nothing small is flattened by something large."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["Band", "Panel", "grouped_bars", "line_overlay", "panels"]


class Band(NamedTuple):
    """A shaded range around a curve (e.g. the reference's noise band)."""

    label: str
    xs: Sequence[float]
    low: Sequence[float]
    high: Sequence[float]


class Panel(NamedTuple):
    """One axis of `panels`: its curves (label -> (xs, ys)), shaded bands, dashed horizontal
    targets (label -> y) and, optionally, a text label beside each point of the first curve."""

    ylabel: str
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]]
    bands: Sequence[Band] = ()
    targets: Mapping[str, float] = {}
    point_labels: Sequence[str] = ()
    title: str = ""


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
    _draw(ax, Panel(ylabel, series, bands), xlabel, mark_x)
    ax.set_title(title)
    return _png(fig)


_BAND_COLOURS = ("#dcdcdc", "#b7e4b0", "#f6e8a6")  # light grey, green, yellow: apart from the curves' colours


def _draw(ax: plt.Axes, panel: Panel, xlabel: str, mark_x: float | None) -> None:
    for i, band in enumerate(panel.bands):
        colour = _BAND_COLOURS[i % len(_BAND_COLOURS)]
        ax.fill_between(band.xs, band.low, band.high, color=colour, alpha=0.8, label=band.label, lw=0)
    for label, (xs, ys) in panel.series.items():
        ax.plot(xs, ys, label=label, marker="o" if len(xs) <= 12 else None, ms=4)
    if panel.point_labels and panel.series:
        xs, ys = next(iter(panel.series.values()))
        for x, y, text in zip(xs, ys, panel.point_labels):
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    for label, y in panel.targets.items():
        ax.axhline(y, color="black", ls=":", lw=1, label=label)
    if mark_x is not None:
        ax.axvline(mark_x, color="red", ls="--", lw=1, label=f"curves part ({xlabel} {mark_x:g})")
    ax.set_ylabel(panel.ylabel)
    if panel.title:
        ax.set_title(panel.title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def panels(
    title: str,
    rows: Sequence[Panel],
    xlabel: str,
    *,
    side_by_side: bool = False,
    heights: Sequence[float] | None = None,
    mark_x: float | None = None,
) -> bytes:
    """Each panel on its own axis, sharing the x axis: stacked (`heights`: their relative sizes),
    or side by side."""
    n = len(rows)
    shape, size = ((1, n), (5 * n, 4)) if side_by_side else ((n, 1), (8, 2.2 + 2.2 * n))
    fig, axes = plt.subplots(
        *shape,
        figsize=size,
        sharex=True,
        squeeze=False,
        gridspec_kw=None if side_by_side else {"height_ratios": heights},
    )
    flat = list(axes.flat)
    for ax, panel in zip(flat, rows):
        _draw(ax, panel, xlabel, mark_x)
    for ax in flat if side_by_side else flat[-1:]:
        ax.set_xlabel(xlabel)
    fig.suptitle(title)
    return _png(fig)
