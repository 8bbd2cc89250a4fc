"""The `kuberay` backend: the run's RayCluster, created when a step first needs it, sized for what the
steps need at trial scale (step 2 one accelerator worker, step 5 `trial.workers`; fixed pools first,
elastic pools at their minimum and grown by the in-tree autoscaler), reused by the later steps, and
deleted when the run ends (`close`). Requests and results travel through the artifact store, which
must therefore be S3 (the pods cannot see the flow's disk). Every job's driver runs on a worker pod (a
driver slot, plus an accelerator for step 6), never on the head; the store's credentials come from
the pods' Secret, never from the job's runtime env (`job_env`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING

from day0.backends.base import JobFailed, Req, Res
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

__all__ = ["KubeRayBackend", "check_kuberay", "job_env"]

# Environment a job needs on the cluster: where the store is, and offline mode. Never a credential:
# those reach the Ray containers from a Kubernetes Secret (`cluster.store_secret`), because a job's
# runtime env is shown by the Ray dashboard's job API to anyone who can reach it.
_JOB_ENV_PREFIXES = ("DAY0_STORE_", "AWS_")
# Not RAY_AUTH_MODE: the cluster's pods are in token mode (KubeRay's env); the flow's own mode must not reach a driver.
_JOB_ENV_NAMES = ("HF_HUB_OFFLINE",)
_SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "SESSION")


def check_kuberay(spec: PipelineSpec) -> None:
    """Refuse a spec the kuberay backend cannot run (`UsageError`, exit 2), before anything starts."""
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
        check_kuberay(ctx.spec)
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
        spec, store = self.ctx.spec.cluster, self.ctx.store
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
