"""The parallelism planner: the cost model and the search that steps 3 and 4 (and `day0 plan`) use.

Contract: pure functions over one `PlanningProblem` (step 1's `ModelStructure`, the cluster, the training
setup, the pins and the options, built once; no torch, no I/O). `plan_parallelism` ranks feasible plans
(or says why none fits and how many accelerators would). Around it: `pins` (the knobs a spec's
`parallel:` pins), `profile` (the platform's calibrated figures), `advice` (the elastic pool's two ends
and what to do next), `frameworks` (a plan as Megatron-LM arguments and a torchtitan config),
`published` (the model against published training runs), `trial_estimate` (step 5's own
configuration). The cost model itself: `model` (per-layer costs), `memory`, `timing` and `step_time`
(the terms), `rates` (per-tuple rates, memoised per search), `stages`, `evaluate` (`PlanContext`),
`bounds`, `space`, `problem`, `search`, `explain`. Each step's identity, logic, verdicts and text are
its own: step 3's in `day0.steps.parallel`, step 4's technique choice in `day0.steps.optimize.techniques`.
"""

from day0.planner.inputs import ClusterFigures, CommSettings, PlannerOptions, cluster_figures, cluster_from_spec
from day0.planner.problem import PlanningProblem
from day0.planner.results import Plan, PlanSearch
from day0.planner.search import brute_force, min_accelerators, plan_parallelism

__all__ = [
    "ClusterFigures",
    "CommSettings",
    "Plan",
    "PlanSearch",
    "PlannerOptions",
    "PlanningProblem",
    "brute_force",
    "cluster_figures",
    "cluster_from_spec",
    "min_accelerators",
    "plan_parallelism",
]
