"""Activation recomputation modes, spelled once for the planner, the trial and the spec:
`none` keeps every activation, `selective` recomputes the attention core (Korthikanti et al. 2022),
`full` recomputes each layer from its input."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["RECOMPUTES", "Recompute"]

Recompute = Literal["none", "selective", "full"]
RECOMPUTES: tuple[Recompute, ...] = get_args(Recompute)  # in order of memory saved
