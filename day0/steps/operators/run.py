"""Step 2 for a run: per-op numerical checks on the platform, adaptation of missing or failing ops,
and the whole-model layer comparison, as a job on the run's backend: in-process on the local
backend, one Ray task on an accelerator worker on a cluster (KubeRay, or `cluster.address`)."""

from __future__ import annotations

from day0.backends.base import run_step_job
from day0.core.result import Progress
from day0.runs.context import RunContext
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.operators.job import JOB, OperatorsRequest
from day0.steps.operators.layers import WholeModel
from day0.steps.operators.op_policy import msprobe_standards
from day0.steps.operators.result import OperatorsResult

__all__ = ["run"]


def run(ctx: RunContext, progress: Progress, analyzed: AnalyzeResult) -> OperatorsResult:
    """Checks step 1's operator inventory; the whole-model check builds step 1's resolved model."""
    spec, backend = ctx.spec, ctx.backend
    request = OperatorsRequest(
        inventory=analyzed.inventory,
        platform=spec.platform,
        validation=spec.validation,
        compute_dtype=spec.training.precision.compute,
        whole_model=WholeModel.from_analysis(analyzed),
        cluster=spec.cluster,
        msprobe=msprobe_standards(spec.validation),
        on_ray=backend.kind != "local" or spec.cluster.address is not None,
    )
    return run_step_job(backend, "operators", JOB, request, progress)
