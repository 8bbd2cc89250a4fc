"""Step 3 as a Prefect task: ranked parallel plans for the spec's model on its cluster (plan.yaml beside it),
with the platform's calibrated profile from the run's store when `day0 calibrate` left one, or measured
first on the run's backend when the spec says `planner.calibrate: true`."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from day0.backends.session import backend_for
from day0.calibration.job import JOB as CALIBRATE
from day0.calibration.job import CalibrationRequest
from day0.planner.profile import load_profile
from day0.planner.results import PlanReport
from day0.planner.step import plan_for_spec
from day0.runs import RunContext
from day0.steps.analyze.result import AnalyzeResult
from tasks._step import run_step, step_logger

__all__ = ["parallel"]


@task(name="parallel", cache_policy=NO_CACHE)
def parallel(ctx: RunContext, analyzed: AnalyzeResult) -> PlanReport:
    def plan() -> PlanReport:
        spec = ctx.spec
        if spec.planner.calibrate:
            backend, log = backend_for(ctx), step_logger()
            request = CalibrationRequest(
                platform=spec.platform,
                workers=max(2, spec.trial.workers),
                store=spec.storage,
                on_cluster=backend.kind != "local",
            )
            report, _ = backend.run("calibrate", CALIBRATE, request, lambda msg: log.info("parallel: %s", msg))
            log.info("parallel: calibrated in %.1f s: %s", report.seconds, report.store_key)
        profile = load_profile(ctx.store(), ctx.spec.platform.name)
        return plan_for_spec(ctx.spec, analyzed.structure, profile)

    return run_step("parallel", ctx, PlanReport, plan)
