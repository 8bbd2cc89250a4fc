"""Step 3's result is the planner's `PlanReport` (ranked plans, the best one's terms, its verdict):
the same report `day0 plan` prints, so it lives with the cost model in `day0.planner`."""

from __future__ import annotations

from day0.planner.results import PlanReport

__all__ = ["PlanReport"]
