"""Step 2 for a run: per-op numerical checks on the platform, adaptation of missing or failing ops,
and the whole-model layer comparison, as a job on the run's backend: in-process on the local
backend, one Ray task on an accelerator worker on a cluster (KubeRay, or `cluster.address`)."""

from __future__ import annotations

from day0.backends.base import run_step_job
from day0.core.result import Progress
from day0.runs.context import RunContext
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.analyze.run import capture_at
from day0.steps.operators.job import JOB, OperatorsRequest
from day0.steps.operators.layers import WholeModel
from day0.steps.operators.op_policy import msprobe_standards
from day0.steps.operators.result import OperatorsResult, TokenShape
from day0.steps.operators.shapes import ShapeInventory

__all__ = ["run"]


def run(ctx: RunContext, progress: Progress, analyzed: AnalyzeResult) -> OperatorsResult:
    """Checks step 1's operator inventory, then its accumulating ops at the trial's and the training's
    token shapes (step 1's capture, repeated at each); the whole-model check builds step 1's resolved model."""
    spec, backend = ctx.spec, ctx.backend
    dtype = analyzed.inventory.compute_dtype
    shapes = [
        TokenShape(name="trial", batch=spec.trial.micro_batch, seq_len=spec.trial.seq_len),
        TokenShape(name="training", batch=spec.training.micro_batch, seq_len=spec.training.seq_len),
    ]
    progress(f"capturing the operators at {' and '.join(str(s) for s in shapes)}")
    production = [
        ShapeInventory(
            shape=s,
            inventory=capture_at(analyzed.model, dtype, s.batch, s.seq_len, analyzed.inventory.kept_whole),
        )
        for s in shapes
    ]
    request = OperatorsRequest(
        inventory=analyzed.inventory,
        platform=spec.platform,
        validation=spec.validation,
        compute_dtype=spec.training.precision.compute,
        whole_model=WholeModel.from_analysis(analyzed),
        cluster=spec.cluster,
        msprobe=msprobe_standards(spec.validation),
        production=production,
        on_ray=backend.kind != "local" or spec.cluster.address is not None,
    )
    return run_step_job(backend, "operators", JOB, request, progress)
