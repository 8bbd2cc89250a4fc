"""Step 4 as a Prefect task: memory/communication techniques for step 3's best plan, each with its
estimated effect; optimized-plan.yaml is what the trial step applies."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from day0.planner.optimize import OptimizationReport
from day0.planner.results import PlanReport
from day0.planner.step import optimize_for_spec
from day0.runs import RunContext
from day0.steps.analyze.result import AnalyzeResult
from tasks._step import run_step

__all__ = ["optimize"]


@task(name="optimize", cache_policy=NO_CACHE)
def optimize(ctx: RunContext, analyzed: AnalyzeResult, planned: PlanReport) -> OptimizationReport:
    return run_step(
        "optimize", ctx, OptimizationReport, lambda: optimize_for_spec(ctx.spec, analyzed.structure, planned)
    )
