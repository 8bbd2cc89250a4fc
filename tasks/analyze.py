"""Step 1 as a Prefect task: structure, operator inventory and coverage diff of the spec's model."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from day0.runs import RunContext
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.analyze.run import analyze_model
from tasks._step import run_step, step_logger

__all__ = ["analyze"]


@task(name="analyze", cache_policy=NO_CACHE)
def analyze(ctx: RunContext) -> AnalyzeResult:
    spec, log = ctx.spec, step_logger()
    return run_step(
        "analyze",
        ctx,
        AnalyzeResult,
        lambda: analyze_model(
            spec.model,
            spec.platform,
            spec.training.precision.compute,
            progress=lambda msg: log.info("analyze: %s", msg),
        ),
    )
