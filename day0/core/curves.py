"""The distance between two loss curves, step by step: one formula for the trial's alignment
(candidate vs reference) and the regression trend (this run vs its baseline)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["relative_errors"]


def relative_errors(reference: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """|c - r| / |r| step by step (a zero reference uses the absolute difference)."""
    return [abs(c - r) / abs(r) if r != 0 else abs(c - r) for r, c in zip(reference, candidate)]
