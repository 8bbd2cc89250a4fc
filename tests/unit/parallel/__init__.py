"""Steps 3-4 (`day0.steps.parallel`, `day0.steps.optimize`), the planner library (`day0.planner`) and `day0 plan`."""
