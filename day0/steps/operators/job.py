"""Step 2 as a job (`JOB`): the same `run_operators` call in the flow's process, or, on a cluster,
as one Ray task on an accelerator worker.

Why one task for all ops: per-op checks are milliseconds each; one job per op would spend its time
scheduling. The task asks for one accelerator of the platform's kind (`day0.backends.resources`):
`num_gpus` for NVIDIA pools, else the custom resource the KubeRay backend advertises (the last part
of the Kubernetes resource name, e.g. `Ascend910`).

    python -m day0.steps.operators.job REQUEST_URL RESULT_URL   # as a submitted Ray job
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from day0.backends.jobs import StepJob
from day0.backends.resources import task_options
from day0.core.ops import OpInventory
from day0.spec.cluster import ClusterSpec, PlatformSpec
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.layers import WholeModel
from day0.steps.operators.msprobe import MsprobeStandards
from day0.steps.operators.result import OperatorsResult
from day0.steps.operators.shapes import ShapeInventory

__all__ = ["JOB", "OperatorsRequest", "main", "run_job_request", "run_operators_on_ray", "run_request"]


class OperatorsRequest(BaseModel):
    """Everything the remote side needs: plain data, so it travels as JSON or through Ray's object store."""

    inventory: OpInventory
    platform: PlatformSpec
    validation: ValidationSpec = Field(default_factory=ValidationSpec)
    compute_dtype: str | None = None
    whole_model: WholeModel | None = Field(None, description="Step 1's model at reduced depth, for the layer check.")
    max_model_params: int | None = Field(
        None, description="Largest reduced model the worker builds (validation.max_model_params unless set)."
    )
    production: list[ShapeInventory] = Field(
        default=[], description="Step 1's capture at the trial's and the training's token shapes."
    )
    cluster: ClusterSpec | None = Field(None, description="The cluster's pools (for the accelerator resource).")
    msprobe: MsprobeStandards | None = Field(
        None, description="msprobe's standards as the run resolved them (validation.tolerance: msprobe)."
    )
    on_ray: bool = Field(False, description="Run as a Ray task on an accelerator worker (a cluster backend).")


def run_request(request: OperatorsRequest, progress: Callable[[str], None] | None = None) -> OperatorsResult:
    """Step 2 for `request`, in this process: what the Ray task and the local backend both run."""
    from day0.steps.operators.checks import run_operators
    from day0.steps.operators.op_policy import remember_standards

    if request.msprobe is not None:  # a worker may have neither the wheel nor day0's snapshot
        remember_standards(request.msprobe)
    return run_operators(
        request.inventory,
        request.platform,
        request.validation,
        request.compute_dtype,
        whole_model=request.whole_model,
        max_model_params=request.max_model_params,
        production=request.production,
        progress=progress,
    )


def run_operators_on_ray(
    request: OperatorsRequest, cluster: ClusterSpec | None = None, address: str | None = None
) -> OperatorsResult:
    """Run step 2 as one Ray task (connects to `address`, or an already initialised Ray)."""
    import ray

    from day0.backends.local.ray import connect, interruptible

    connect(address)
    remote = ray.remote(run_request).options(**task_options(request.platform, cluster or request.cluster))
    with interruptible():
        return ray.get(remote.remote(request))


def run_job_request(request: OperatorsRequest, progress: Callable[[str], None] | None = None) -> OperatorsResult:
    """What `JOB` runs: a Ray task on an accelerator worker when `request.on_ray`, else this process."""
    if request.on_ray:
        if progress:
            progress(f"one Ray task asking for {task_options(request.platform, request.cluster)}")
        # no address: this is a job submitted to the run's cluster, and "auto" joins that cluster
        address = request.cluster.address if request.cluster and request.cluster.address else "auto"
        return run_operators_on_ray(request, address=address)
    return run_request(request, progress)


JOB = StepJob("day0.steps.operators.job", OperatorsRequest, OperatorsResult, run_job_request)
main = JOB.main


if __name__ == "__main__":
    raise SystemExit(main())
