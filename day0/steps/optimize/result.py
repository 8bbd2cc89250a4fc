"""Step 4's result is the planner's `OptimizationReport` (the techniques chosen for step 3's best
plan and the optimized plan the trial applies), beside the cost model in `day0.planner`."""

from __future__ import annotations

from day0.planner.optimize import OptimizationReport

__all__ = ["OptimizationReport"]
