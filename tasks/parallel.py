"""Step 3 as a Prefect task: ranked parallel plans for the spec's model on its cluster (plan.yaml beside it)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from day0.analysis.results import AnalyzeResult
from day0.planner.results import PlanReport
from day0.planner.step import plan_for_spec
from day0.runs import RunContext
from tasks._step import run_step

__all__ = ["parallel"]


@task(name="parallel", cache_policy=NO_CACHE)
def parallel(ctx: RunContext, analyzed: AnalyzeResult) -> PlanReport:
    return run_step("parallel", ctx, PlanReport, lambda: plan_for_spec(ctx.spec, analyzed.structure))
