"""A run's backend, chosen by its spec: opened around the run's steps and carried by its context.

    with run_backend(ctx, pods, progress=log.info):  # the flow, around its steps
        result, execution = ctx.backend.run("trial", TRIAL_JOB, request, progress=log.info)

- `local` (`day0.backends.local`): the job's function runs in the flow's process.
- `kuberay` (`day0.backends.kuberay.backend`): the run's RayCluster, deleted when the run ends on
  every path (the flow's `finally`, which SIGTERM reaches through the CLI's handler, and the flow's
  cancellation hook). A run that starts sweeps leftover clusters of its own run id first (`sweep_run`);
  `cluster.keep_cluster` keeps the cluster.

`check_backend` refuses, before anything starts, a spec its backend cannot run. Outside
`run_backend` a context's backend is a local one (a step's `run` called on its own).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from day0.backends.base import Backend
from day0.backends.kuberay.backend import KubeRayBackend, check_kuberay
from day0.backends.local.backend import LocalBackend
from day0.core.result import Progress
from day0.runs.context import RunContext
from day0.spec.pipeline import PipelineSpec

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["check_backend", "run_backend", "sweep_run"]


def check_backend(spec: PipelineSpec) -> None:
    """Refuse, before anything starts, a backend the spec cannot run on (`UsageError`, exit 2)."""
    if spec.cluster.backend == "kuberay":
        check_kuberay(spec)


@contextmanager
def run_backend(
    ctx: RunContext, pods: int, *, progress: Progress, api_client: ApiClient | None = None
) -> Iterator[Backend]:
    """Open the run's backend (on KubeRay a RayCluster of `pods` accelerator workers); close it on every exit."""
    backend: Backend
    if ctx.spec.cluster.backend == "kuberay":
        backend = KubeRayBackend(ctx, pods, api_client=api_client)
    else:
        backend = LocalBackend(ctx.spec.cluster.address)
    ctx.use_backend(backend)
    try:
        yield backend
    finally:
        ctx.use_backend(None)
        if isinstance(backend, KubeRayBackend) and backend.cluster is not None:
            kept = ctx.spec.cluster.keep_cluster
            progress(f"cluster: {'keeping' if kept else 'deleting'} RayCluster {backend.cluster.name}")
        backend.close()


def sweep_run(spec: PipelineSpec, run_id: str) -> list[str]:
    """Delete a run's RayClusters by its run id (the flow's cancellation/crash hook)."""
    if spec.cluster.backend != "kuberay" or spec.cluster.keep_cluster:
        return []
    from day0.backends.kuberay.lifecycle import delete_run_clusters

    return delete_run_clusters(spec.cluster.namespace, run_id)
