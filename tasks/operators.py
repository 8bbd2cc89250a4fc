"""Step 2 as a Prefect task: per-op numerical checks on the platform, adaptation of missing or
failing ops, and the whole-model layer comparison, as a job on the run's backend: in-process on the
local backend, one Ray task on an accelerator worker on a cluster (KubeRay, or `cluster.address`)."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from day0.backends.session import backend_for
from day0.runs import RunContext
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.operators.job import JOB, OperatorsRequest
from day0.steps.operators.layers import WholeModel
from day0.steps.operators.result import OperatorsResult
from tasks._step import in_prefect_run, run_step, step_logger

__all__ = ["operators"]


def _publish_table(ctx: RunContext, result: OperatorsResult) -> None:
    rows = [
        {
            "op": c.op,
            "dtype": c.dtype,
            "status": c.status,
            "grad": c.grad_status,
            "max_abs": c.metrics.max_abs if c.metrics else None,
            "cosine": c.metrics.cosine if c.metrics else None,
            "kernel": ", ".join(c.served_by),
        }
        for c in result.ops.checks
    ]
    if in_prefect_run():
        create_table_artifact(
            table=rows,
            key=f"{ctx.spec.metadata.name}-operators-table".lower(),
            description="day0 step 2: per-operator checks",
        )


@task(name="operators", cache_policy=NO_CACHE)
def operators(ctx: RunContext, analyzed: AnalyzeResult) -> OperatorsResult:
    """Checks step 1's operator inventory; the whole-model check builds step 1's resolved model."""
    spec, log = ctx.spec, step_logger()

    def compute() -> OperatorsResult:
        backend = backend_for(ctx)
        request = OperatorsRequest(
            inventory=analyzed.inventory,
            platform=spec.platform,
            validation=spec.validation,
            compute_dtype=spec.training.precision.compute,
            whole_model=WholeModel.from_analysis(analyzed),
            cluster=spec.cluster,
            on_ray=backend.kind != "local" or spec.cluster.address is not None,
        )
        result, execution = backend.run("operators", JOB, request, lambda msg: log.info("operators: %s", msg))
        return result.model_copy(update={"execution": execution})

    result = run_step("operators", ctx, OperatorsResult, compute)
    _publish_table(ctx, result)
    return result
