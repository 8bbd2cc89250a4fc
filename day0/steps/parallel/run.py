"""Step 3 for a run: ranked parallel plans for the spec's model on its cluster (plan.yaml beside it),
with the platform's calibrated profile from the run's store when `day0 calibrate` or this step's
calibration sub-step (`calibrate`, run before it when the spec says `planner.calibrate: true`) left one."""

from day0.backends.base import run_step_job
from day0.calibration.job import JOB as CALIBRATE
from day0.calibration.job import CalibrationRequest
from day0.calibration.run import CalibrationReport
from day0.core.result import Progress
from day0.planner.profile import load_profile
from day0.runs.context import RunContext
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.parallel.plan import plan_for_spec
from day0.steps.parallel.result import PlanReport

__all__ = ["calibrate", "run"]


def calibrate(ctx: RunContext, progress: Progress) -> CalibrationReport:
    """The calibration sub-step: `day0 calibrate`'s job on the run's backend, its profile into the run's store."""
    spec, backend = ctx.spec, ctx.backend
    request = CalibrationRequest(
        platform=spec.platform,
        workers=max(2, spec.trial.workers),
        store=spec.storage,
        on_cluster=backend.kind != "local",
    )
    report = run_step_job(backend, "calibrate", CALIBRATE, request, progress)
    progress(f"calibrated in {report.seconds:.1f} s: {report.store_key}")
    return report


def run(ctx: RunContext, progress: Progress, analyzed: AnalyzeResult) -> PlanReport:
    profile = load_profile(ctx.store, ctx.spec.platform.name)
    return plan_for_spec(ctx.spec, analyzed.structure, profile)
