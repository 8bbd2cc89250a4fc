"""Step 2 as a Prefect task: per-op numerical checks on the platform, adaptation of missing or
failing ops, and the whole-model layer comparison; in-process on the local backend, as one Ray
task on an accelerator worker when the cluster is KubeRay."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext, TaskRunContext
from pydantic import BaseModel

from day0.analysis.results import AnalyzeResult
from day0.numerics.ray_job import OperatorsRequest, run_operators_on_ray
from day0.numerics.results import OperatorsResult
from day0.numerics.step import run_operators
from day0.runs import RunContext
from tasks._step import run_step, step_logger

__all__ = ["operators"]


def _publish_table(ctx: RunContext, result: OperatorsResult) -> None:
    rows = [{"op": c.op, "dtype": c.dtype, "status": c.status, "grad": c.grad_status,
             "max_abs": c.metrics.max_abs if c.metrics else None, "cosine": c.metrics.cosine if c.metrics else None,
             "kernel": ", ".join(c.served_by)} for c in result.ops.checks]
    if FlowRunContext.get() or TaskRunContext.get():  # outside a flow (task.fn in a test) there is no run
        create_table_artifact(table=rows, key=f"{ctx.spec.metadata.name}-operators-table".lower(),
                              description="day0 step 2: per-operator checks")


@task(name="operators", cache_policy=NO_CACHE)
def operators(ctx: RunContext, inputs: dict[str, BaseModel]) -> OperatorsResult:
    """`inputs["analyze"]`: step 1's result (its operator inventory is what gets checked)."""
    spec, log = ctx.spec, step_logger()
    analyzed = inputs["analyze"]
    assert isinstance(analyzed, AnalyzeResult), "step 2 needs step 1's AnalyzeResult"
    request = OperatorsRequest(inventory=analyzed.inventory, platform=spec.platform, validation=spec.validation,
                               compute_dtype=spec.training.precision.compute, model_source=spec.model.source)

    def compute() -> OperatorsResult:
        if spec.cluster.backend == "kuberay" or spec.cluster.address:
            log.info("operators: one Ray task on an accelerator worker")
            return run_operators_on_ray(request, spec.cluster, spec.cluster.address)
        return run_operators(request.inventory, request.platform, request.validation, request.compute_dtype,
                             model_source=request.model_source, layers=request.layers,
                             progress=lambda msg: log.info("operators: %s", msg))

    result = run_step("operators", ctx, OperatorsResult, compute)
    _publish_table(ctx, result)
    return result
