"""Step 3 for a run: ranked parallel plans for the spec's model on its cluster (plan.yaml beside it),
with the platform's calibrated profile from the run's store when `day0 calibrate` left one, or measured
first on the run's backend when the spec says `planner.calibrate: true`."""

from day0.calibration.job import JOB as CALIBRATE
from day0.calibration.job import CalibrationRequest
from day0.core.result import Progress
from day0.planner.profile import load_profile
from day0.runs.context import RunContext
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.parallel.plan import plan_for_spec
from day0.steps.parallel.result import PlanReport

__all__ = ["run"]


def run(ctx: RunContext, progress: Progress, analyzed: AnalyzeResult) -> PlanReport:
    spec = ctx.spec
    if spec.planner.calibrate:
        backend = ctx.backend
        request = CalibrationRequest(
            platform=spec.platform,
            workers=max(2, spec.trial.workers),
            store=spec.storage,
            on_cluster=backend.kind != "local",
        )
        report, _ = backend.run("calibrate", CALIBRATE, request, progress)
        progress(f"calibrated in {report.seconds:.1f} s: {report.store_key}")
    profile = load_profile(ctx.store, spec.platform.name)
    return plan_for_spec(spec, analyzed.structure, profile)
