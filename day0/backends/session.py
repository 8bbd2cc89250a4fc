"""A run's Ray backend: where steps 2, 5 and 6 send their work, as `StepJob`s.

    with run_backend(ctx, pods, progress=log.info):  # the flow, around its steps
        result, execution = backend_for(ctx).run("trial", TRIAL_JOB, request, progress=log.info)

- `local`: the job's function runs in the flow's process; Ray, where a step uses it, is a private
  local instance (or `cluster.address`).
- `kuberay`: the run's RayCluster is created when a step first needs it, sized for what the steps
  need at trial scale (step 2 one accelerator worker, step 5 `trial.workers`; fixed pools first,
  elastic pools at their minimum and grown by the in-tree autoscaler), reused by the later steps, and
  deleted when the run ends on every path (the flow's `finally`, which SIGTERM reaches through the
  CLI's handler, and the flow's cancellation hook). A run that starts sweeps leftover clusters of its
  own run id first; `cluster.keep_cluster` keeps the cluster. Requests and results travel through the
  artifact store, which must therefore be S3 (the pods cannot see the flow's disk). Every job's driver
  runs on a worker pod (a driver slot, plus an accelerator for step 6), never on the head; the store's
  credentials come from the pods' Secret, never from the job's runtime env.

One backend per run id, kept in this process while the run's flow is inside `run_backend`; a task
called outside a flow gets a local backend.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar

from pydantic import BaseModel

from day0.backends.jobs import StepJob, submission_id
from day0.backends.resources import driver_placement
from day0.core.result import Execution, ExecutionEvent, Progress
from day0.errors import UsageError
from day0.runs.context import RunContext
from day0.spec.pipeline import PipelineSpec

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from day0.backends.kuberay.lifecycle import KubeRayCluster
    from day0.backends.kuberay.status import ClusterEvent

__all__ = [
    "Backend",
    "JobFailed",
    "KubeRayBackend",
    "LocalBackend",
    "backend_for",
    "check_backend",
    "job_env",
    "run_backend",
    "sweep_run",
]

Req = TypeVar("Req", bound=BaseModel)
Res = TypeVar("Res", bound=BaseModel)

# Environment a job needs on the cluster: where the store is, and offline mode. Never a credential:
# those reach the Ray containers from a Kubernetes Secret (`cluster.store_secret`), because a job's
# runtime env is shown by the Ray dashboard's job API to anyone who can reach it.
_JOB_ENV_PREFIXES = ("DAY0_STORE_", "AWS_")
_JOB_ENV_NAMES = ("HF_HUB_OFFLINE", "RAY_AUTH_MODE")
_SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "SESSION")


class JobFailed(RuntimeError):
    """A step's Ray job ended without a result (failed, stopped or timed out): the step fails."""


class Backend(Protocol):
    kind: str

    def run(self, step: str, job: StepJob[Req, Res], request: Req, progress: Progress) -> tuple[Res, Execution]: ...

    def close(self) -> None: ...


class LocalBackend:
    """The job's function in this process (Ray inside it, where the step uses Ray, is local)."""

    kind = "local"

    def __init__(self, address: str | None = None) -> None:
        self.address = address

    def run(self, step: str, job: StepJob[Req, Res], request: Req, progress: Progress) -> tuple[Res, Execution]:
        start = time.monotonic()
        result = job.run(request, progress)
        took = round(time.monotonic() - start, 3)
        return result, Execution(backend="local", cluster=self.address, duration_s=took)

    def close(self) -> None:
        pass


def check_backend(spec: PipelineSpec) -> None:
    """Refuse, before anything starts, a backend the spec cannot run on (`UsageError`, exit 2)."""
    if spec.cluster.backend != "kuberay":
        return
    if not spec.storage.startswith("s3://"):
        raise UsageError(
            f"storage: {spec.storage!r}: the kuberay backend needs an s3:// store (its jobs read their "
            "requests and write their results there; the pods cannot see this machine's disk)"
        )
    if not spec.cluster.node_pools:
        raise UsageError("cluster.node_pools: the kuberay backend needs at least one node pool")


def _secret(name: str) -> bool:
    return any(word in name.upper() for word in _SECRET_WORDS)


def job_env() -> dict[str, str]:
    """The flow's settings a job on the cluster needs (see `_JOB_ENV_PREFIXES`), credentials left out."""
    env = {
        k: v
        for k, v in os.environ.items()
        if (k.startswith(_JOB_ENV_PREFIXES) or k in _JOB_ENV_NAMES) and not _secret(k)
    }
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _driver_lost(sub_id: str, message: str) -> ClusterEvent:
    from day0.backends.kuberay.status import ClusterEvent

    return ClusterEvent(
        kind="job-resubmitted", at=time.time(), message=f"{sub_id}: driver's node lost: {message[:300]}"
    )


def _events(raw: list[ClusterEvent]) -> list[ExecutionEvent]:
    return [ExecutionEvent.model_validate(e.model_dump()) for e in raw]


class KubeRayBackend:
    """The run's RayCluster on Kubernetes (see the module docstring)."""

    kind = "kuberay"

    def __init__(self, ctx: RunContext, pods: int, *, api_client: ApiClient | None = None) -> None:
        check_backend(ctx.spec)
        self.ctx, self.pods, self.api_client = ctx, pods, api_client
        self.cluster: KubeRayCluster | None = None  # created by the first job
        self._reported = 0  # events already handed to a step result

    def _provision(self, progress: Progress) -> KubeRayCluster:
        from day0.backends.kuberay.lifecycle import KubeRayCluster, delete_run_clusters
        from day0.backends.kuberay.manifest import build_raycluster, workers_for_pods

        spec = self.ctx.spec.cluster
        left = delete_run_clusters(spec.namespace, self.ctx.run_id, api_client=self.api_client)
        if left:
            progress(f"cluster: deleted leftover RayCluster(s) of this run: {', '.join(left)}")
        workers = workers_for_pods(spec, self.pods)
        rc = KubeRayCluster(build_raycluster(spec, self.ctx.run_id, workers=workers), api_client=self.api_client)
        self.cluster = rc  # set before create: `close` deletes even a cluster that never got Ready
        rc.create()
        sizes = ", ".join(f"{pool} {n}" for pool, n in workers.items())
        progress(f"cluster: created RayCluster {spec.namespace}/{rc.name} (worker pods per pool: {sizes})")
        stop = threading.Event()

        def report() -> None:  # provisioning progress: pods ready/desired per pool, and why not
            while not stop.wait(15):
                short = rc.pool_reports()
                progress("cluster: provisioning: " + ("; ".join(map(str, short)) if short else "all pods Ready"))

        reporter = threading.Thread(target=report, name="day0-provisioning", daemon=True)
        reporter.start()
        try:
            took = rc.wait_ready(spec.ready_timeout_s)
        finally:
            stop.set()
        progress(f"cluster: RayCluster {rc.name} Ready in {took:.1f} s")
        return rc

    def run(self, step: str, job: StepJob[Req, Res], request: Req, progress: Progress) -> tuple[Res, Execution]:
        spec, store = self.ctx.spec.cluster, self.ctx.store()
        rc = self.cluster or self._provision(progress)
        request_key, result_key = self.ctx.key(step, "job", "request.json"), self.ctx.key(step, "job", "result.json")
        store.put_text(request_key, request.model_dump_json(), "application/json")
        for attempt in range(spec.job_resubmits + 1):
            address = rc.dashboard_address(spec.dashboard_via)
            sub_id = submission_id(self.ctx.run_id, step)
            progress(f"job {sub_id}: submitted to {address} ({rc.name})")
            outcome = rc.run_job(
                job.entrypoint(store.url(request_key), store.url(result_key)),
                timeout_s=spec.job_timeout_s,
                address=address,
                sub_id=sub_id,
                runtime_env={"env_vars": job_env()},
                metadata={"day0.step": step, "day0.run_id": self.ctx.run_id},
                placement=driver_placement(self.ctx.spec.platform, spec, job.driver_uses_accelerator),
                on_log=lambda line: progress(f"[job] {line}"),
            ).job
            if not outcome.driver_lost or attempt == spec.job_resubmits:
                break
            # The driver runs on a worker pod, so a lost node can take it; the work resumes (the trial from its
            # checkpoint) in a new submission once KubeRay has replaced the pod.
            progress(
                f"job {sub_id}: its driver's node was lost; submitting again ({attempt + 1} of {spec.job_resubmits})"
            )
            rc.events.append(_driver_lost(sub_id, outcome.message))
        events = _events(rc.events[self._reported :])
        self._reported = len(rc.events)
        if not outcome.ok:
            why = "timed out" if outcome.timed_out else outcome.status.lower()
            raise JobFailed(
                f"{step}: Ray job {sub_id} on RayCluster {rc.name} {why}: {outcome.message or 'no message'}; "
                f"last lines of its log:\n{outcome.logs_tail}"
            )
        result = job.result_type.model_validate_json(store.get_bytes(result_key))
        execution = Execution(
            backend="kuberay", cluster=rc.name, job_id=sub_id, duration_s=outcome.duration_s, events=events
        )
        return result, execution

    def close(self) -> None:
        if self.cluster is None or self.ctx.spec.cluster.keep_cluster:
            return
        self.cluster.stop_monitor()
        self.cluster.delete()


_ACTIVE: dict[str, Backend] = {}
_LOCK = threading.Lock()


def backend_for(ctx: RunContext) -> Backend:
    """The backend of `ctx`'s run (inside `run_backend`), else a local one."""
    with _LOCK:
        return _ACTIVE.get(ctx.run_id) or LocalBackend(ctx.spec.cluster.address)


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
    with _LOCK:
        _ACTIVE[ctx.run_id] = backend
    try:
        yield backend
    finally:
        with _LOCK:
            _ACTIVE.pop(ctx.run_id, None)
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
