"""Step 2 on a cluster: the same `run_operators` entrypoint as one Ray task on an accelerator worker.

Why one task for all ops: per-op checks are milliseconds each; one job per op would spend its time
scheduling. The task asks for one accelerator of the platform's kind: `num_gpus` for NVIDIA pools,
else the custom resource the KubeRay backend advertises (the last part of the Kubernetes resource
name, e.g. `Ascend910`).

    python -m day0.numerics.ray_job request.json result.json   # as a submitted Ray job
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from day0.core.ops import OpInventory
from day0.numerics.layers import WholeModel
from day0.numerics.results import OperatorsResult
from day0.spec import ClusterSpec, PlatformSpec, ValidationSpec

__all__ = ["OperatorsRequest", "accelerator_options", "main", "run_operators_on_ray", "run_request"]


class OperatorsRequest(BaseModel):
    """Everything the remote side needs: plain data, so it travels as JSON or through Ray's object store."""

    inventory: OpInventory
    platform: PlatformSpec
    validation: ValidationSpec = Field(default_factory=ValidationSpec)
    compute_dtype: str | None = None
    whole_model: WholeModel | None = Field(None, description="Step 1's model at reduced depth, for the layer check.")
    max_model_params: int = Field(300_000_000, description="Largest reduced model the worker builds.")


def accelerator_options(platform: PlatformSpec, cluster: ClusterSpec | None = None) -> dict[str, Any]:
    """Ray task options asking for one accelerator of the platform (none for the CPU platform)."""
    if platform.device_type == "cpu":
        return {"num_cpus": 1}
    pools = [p for p in (cluster.node_pools if cluster else [])]
    resource = pools[0].accelerator.resource if pools else ("nvidia.com/gpu" if platform.device_type == "cuda" else "")
    if resource in ("nvidia.com/gpu", ""):
        return {"num_cpus": 1, "num_gpus": 1}
    return {"num_cpus": 1, "resources": {resource.split("/")[-1]: 1}}


def run_request(request: OperatorsRequest, progress: Callable[[str], None] | None = None) -> OperatorsResult:
    """Step 2 for `request`, in this process: what the Ray task and the local backend both run."""
    from day0.numerics.step import run_operators

    return run_operators(
        request.inventory,
        request.platform,
        request.validation,
        request.compute_dtype,
        whole_model=request.whole_model,
        max_model_params=request.max_model_params,
        progress=progress,
    )


def run_operators_on_ray(
    request: OperatorsRequest, cluster: ClusterSpec | None = None, address: str | None = None
) -> OperatorsResult:
    """Run step 2 as one Ray task (connects to `address`, or an already initialised Ray)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    remote = ray.remote(run_request).options(**accelerator_options(request.platform, cluster))
    return ray.get(remote.remote(request))


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2:
        print("usage: python -m day0.numerics.ray_job REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request = OperatorsRequest.model_validate_json(Path(args[0]).read_text())
    Path(args[1]).write_text(run_request(request).model_dump_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
