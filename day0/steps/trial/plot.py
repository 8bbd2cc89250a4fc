"""Step 5's loss plot: both curves above, their relative difference below, each with the tolerance
band (and the reference's seed-to-seed spread when estimated) on its own scale. At the loss's scale
a band of a fraction of a percent is thinner than the curves; against the difference it is plain to see.
"""

from typing import NamedTuple

from day0.plots import Band, Panel, panels
from day0.steps.trial.alignment import AlignmentReport

__all__ = ["Curve", "loss_plot"]


class Curve(NamedTuple):
    """A loss curve as the plot draws it."""

    label: str
    steps: list[int]
    loss: list[float]


def _widths(a: AlignmentReport) -> list[tuple[str, float]]:
    """(label, relative half-width) of each band, widest first (drawn first, beneath)."""
    bands = [(f"tolerance (±{a.loss_threshold:.2%})", a.loss_threshold)]
    if a.noise is not None:
        bands.append((f"seed-to-seed spread (±{a.noise.loss_spread_rel:.2%})", a.noise.loss_spread_rel))
    return sorted(bands, key=lambda b: -b[1])


def loss_plot(model: str, ref: Curve, cand: Curve, a: AlignmentReport) -> bytes:
    widths = _widths(a)
    steps = [s for s, _ in zip(ref.steps, cand.loss)]
    diff = [100 * (c - r) / abs(r) if r else float("nan") for r, c in zip(ref.loss, cand.loss)]
    loss = Panel(
        "loss",
        {ref.label: (ref.steps, ref.loss), cand.label: (cand.steps, cand.loss)},
        bands=[
            Band(label, ref.steps, [v * (1 - w) for v in ref.loss], [v * (1 + w) for v in ref.loss])
            for label, w in widths
        ],
    )
    window = (
        f"the mean from step {a.mean_window_start} is judged: {a.loss_mean_rel_error:.3%} (< {a.loss_threshold:.2%})"
    )
    # the same bands as above: "_" keeps them out of this panel's legend (matplotlib's convention)
    relative = Panel(
        "candidate vs reference, %",
        {"(candidate - reference) / reference": (steps, diff)},
        bands=[Band(f"_{label}", steps, [-100 * w] * len(steps), [100 * w] * len(steps)) for label, w in widths],
        title=window,
    )
    parted = f"; curves part at step {a.parted_at_step}" if a.parted_at_step else ""
    return panels(
        f"{model} trial: loss, {ref.label} vs {cand.label}{parted}",
        [loss, relative],
        "step",
        heights=[2, 1],
        mark_x=a.parted_at_step,
    )
