"""The life of a run's RayCluster on the API server: create, wait Ready, run jobs, delete, sweep.

Contracts:
- `KubeRayCluster` creates a manifest from `day0.backends.kuberay.manifest` and waits until it is
  Ready by watching the RayCluster's `status.conditions` (not the deprecated `status.state`); on
  timeout the `ClusterError` names each short pool and the resource the scheduler said it lacks.
- While a job runs (`run_job`, or between `start_monitor` and `stop_monitor`), a `ClusterMonitor`
  watches the pods, the nodes and the events and recovers lost pods. Every event of the cluster's
  life (created, ready, scale-up, node-lost, pod-replaced, recovered, deleted, ...) lands in `.events`.
- Waiting is watching: `wait_ready`, `wait_recovered` and `delete` follow `ResourceWatch` streams
  (resumed by resourceVersion, relisted on 410 Gone) until the state they need, or their deadline.
- Jobs go to the head with the cluster's Ray token (`auth_token`), read once from the Secret KubeRay
  creates for it (the runner's only right on Secrets: `get`, in the runs namespace).
- `delete` returns once the RayCluster and its pods are gone, force-deleting pods left on dead nodes.
- `raycluster_session` always deletes on exit (success, error, cancellation) unless
  `ClusterSpec.keep_cluster`; `delete_run_clusters` sweeps leftovers by label.
Job submission to the head goes through `day0.backends.jobs` (shared with the local backend).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Unpack, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, Field

from day0.backends.jobs import JobOptions, JobOutcome, run_job
from day0.backends.kuberay.manifest import (
    GROUP,
    PLURAL,
    RUN_ID_LABEL,
    VERSION,
    BuildOptions,
    build_raycluster,
    label_value,
)
from day0.backends.kuberay.monitor import ClusterMonitor
from day0.backends.kuberay.status import (
    CLUSTER_LABEL,
    ClusterError,
    ClusterEvent,
    Pod,
    PoolReport,
    pool_reports,
    raycluster_ready,
)
from day0.backends.kuberay.watching import ResourceWatch
from day0.core.typing import KubeObject
from day0.spec.cluster import ClusterSpec

__all__ = ["KubeRayCluster", "RunResult", "delete_run_clusters", "raycluster_session"]


class RunResult(BaseModel):
    """A job run on the cluster and what happened to the cluster meanwhile."""

    job: JobOutcome
    events: list[ClusterEvent] = Field(default=[])


def _api_client(api_client: client.ApiClient | None) -> client.ApiClient:
    if api_client is not None:
        return api_client
    try:
        return config.new_client_from_config()  # $KUBECONFIG or ~/.kube/config
    except config.ConfigException:
        config.load_incluster_config()
        return client.ApiClient()


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "").get("message", exc.reason))
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def _watch_until(watch: ResourceWatch, done: Callable[[ResourceWatch], bool]) -> bool:
    """Follow `watch` until `done(watch)` holds on a complete listing; False at the watch's deadline."""
    synced = False
    for kind, _ in watch:
        synced = synced or kind == "SYNCED"
        if synced and done(watch):
            return True
    return False


class KubeRayCluster:
    """A RayCluster on the API server: create, wait Ready, monitor failures, delete."""

    def __init__(self, manifest: KubeObject, *, api_client: client.ApiClient | None = None) -> None:
        self.manifest = manifest
        self.name: str = manifest["metadata"]["name"]
        self.namespace: str = manifest["metadata"]["namespace"]
        api = _api_client(api_client)
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self.events: list[ClusterEvent] = []
        self._monitor: ClusterMonitor | None = None
        self._token: str | None = None
        self.uid: str | None = None  # the object this handle created: `delete` removes that one only

    @classmethod
    def attach(cls, name: str, namespace: str, *, api_client: client.ApiClient | None = None) -> KubeRayCluster:
        """A handle on an existing RayCluster (for teardown sweeps)."""
        return cls({"metadata": {"name": name, "namespace": namespace}}, api_client=api_client)

    # -- reading --
    def get(self) -> KubeObject | None:
        try:
            obj = self._custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
            return cast(KubeObject, obj)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def desired_workers(self) -> int:
        return sum(int(g.get("replicas", 0)) for g in self.manifest.get("spec", {}).get("workerGroupSpecs", []))

    def pods(self) -> list[Pod]:
        return self._core.list_namespaced_pod(self.namespace, label_selector=f"{CLUSTER_LABEL}={self.name}").items

    def pool_reports(self) -> list[PoolReport]:
        """Per worker group (and the head) that is short: desired, pods, Ready, Pending, and why Pending."""
        return pool_reports(self.pods(), self.manifest)

    def dashboard_address(self, via: str = "service") -> str:
        """The head's job API: through KubeRay's `<name>-head-svc` Service (from inside the cluster),
        or (`via="pod-ip"`) at the head pod's IP, for a flow whose host routes to pod IPs."""
        if via == "pod-ip":
            heads = [p for p in self.pods() if (p.metadata.labels or {}).get("ray.io/node-type") == "head"]
            ips = [p.status.pod_ip for p in heads if p.status and p.status.pod_ip]
            if not ips:
                raise ClusterError(f"RayCluster {self.name}: the head pod has no IP yet")
            return f"http://{ips[0]}:8265"
        return f"http://{self.name}-head-svc.{self.namespace}.svc.cluster.local:8265"

    def auth_token(self) -> str:
        """The cluster's Ray token: key `auth_token` of the Secret KubeRay creates for `authOptions.mode:
        token`, named after the cluster (KubeRay's `CheckName` leaves day0's short names as they are)."""
        if self._token is None:
            try:
                secret = self._core.read_namespaced_secret(self.name, self.namespace)
            except ApiException as exc:
                hint = {404: "missing (KubeRay creates it with the cluster)", 403: "not readable by this account"}
                raise ClusterError(
                    f"RayCluster {self.namespace}/{self.name}: its Ray token Secret {self.name!r} is "
                    f"{hint.get(exc.status, f'unreadable: HTTP {exc.status}')}: {_api_message(exc)}"
                ) from exc
            data = secret.data or {}
            if "auth_token" not in data:
                raise ClusterError(f"RayCluster {self.namespace}/{self.name}: Secret {self.name!r} has no auth_token")
            self._token = base64.b64decode(data["auth_token"]).decode()
        return self._token

    def _watch_self(self, deadline: float) -> ResourceWatch:
        return ResourceWatch(
            self._custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            field_selector=f"metadata.name={self.name}",
            deadline=deadline,
        )

    def _watch_pods(self, deadline: float) -> ResourceWatch:
        return ResourceWatch(
            self._core.list_namespaced_pod,
            self.namespace,
            label_selector=f"{CLUSTER_LABEL}={self.name}",
            deadline=deadline,
        )

    # -- lifecycle --
    def create(self) -> None:
        try:
            created = self._custom.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, self.manifest
            )
        except ApiException as exc:
            hint = {
                404: f"namespace {self.namespace!r} or the RayCluster CRD ({GROUP}/{VERSION}) is missing: "
                "install KubeRay's CRDs",
                409: "a RayCluster of that name already exists",
                422: "the API server rejected the manifest",
            }.get(exc.status, f"HTTP {exc.status}")
            raise ClusterError(
                f"creating RayCluster {self.namespace}/{self.name}: {hint}: {_api_message(exc)}"
            ) from exc
        self.uid = cast("dict[str, dict[str, str]]", created)["metadata"]["uid"]
        self.events.append(ClusterEvent(kind="created", message=f"{self.desired_workers()} workers requested"))

    def _ready_by(self, deadline: float) -> bool:
        """Watch the RayCluster until it is Ready (True) or the deadline passes (False)."""
        watch = self._watch_self(deadline)
        for kind, _ in watch:
            if kind == "DELETED":
                raise ClusterError(f"RayCluster {self.namespace}/{self.name} was deleted while waiting")
            if any(raycluster_ready(obj, self.desired_workers()) for obj in watch.objects.values()):
                return True
        return False

    def wait_ready(self, timeout_s: float) -> float:
        """Block until head and all workers are Ready; return seconds taken.

        On timeout, `ClusterError` names each pool that is short and the resource it lacks."""
        start = time.monotonic()
        if not self._ready_by(start + timeout_s):
            raise ClusterError(
                f"RayCluster {self.namespace}/{self.name} not Ready after {timeout_s:.0f} s: "
                + "; ".join(str(r) for r in self.pool_reports())
            )
        took = time.monotonic() - start
        self.events.append(
            ClusterEvent(kind="ready", message=f"{self.desired_workers()} workers Ready in {took:.1f} s")
        )
        return took

    def wait_recovered(self, timeout_s: float) -> float:
        """After a loss: wait until every group has its Ready pods again (watched on the pods
        themselves: the RayCluster status can lag a deletion), then the RayCluster; records `recovered`."""
        start = time.monotonic()
        deadline = start + timeout_s
        pods = self._watch_pods(deadline)
        if not (
            _watch_until(pods, lambda w: not pool_reports(w.objects.values(), self.manifest))
            and self._ready_by(deadline)
        ):
            raise ClusterError(
                f"RayCluster {self.name} not recovered after {timeout_s:.0f} s: "
                + "; ".join(map(str, pool_reports(pods.objects.values(), self.manifest)))
            )
        took = time.monotonic() - start
        kinds = [e.kind for e in self.events]
        last_loss = max((i for i, k in enumerate(kinds) if k in ("node-lost", "pod-lost")), default=-1)
        if "recovered" not in kinds[last_loss + 1 :]:  # the monitor, when running, has recorded it already
            self.events.append(ClusterEvent(kind="recovered", message=f"all workers Ready again in {took:.1f} s"))
        return took

    def start_monitor(self) -> None:
        """Watch for failures in the background while a job runs (events go to `.events`)."""
        if self._monitor is None:
            monitor = ClusterMonitor(self._core, self.namespace, self.name, self.events)
            monitor.start()
            self._monitor = monitor

    def stop_monitor(self) -> None:
        if self._monitor is not None:
            self._monitor.stop()
            self._monitor = None

    def run_job(
        self, entrypoint: str, *, timeout_s: float, address: str | None = None, **job: Unpack[JobOptions]
    ) -> RunResult:
        """Run a Ray job on the head (with the cluster's token) while watching the cluster; lost
        nodes/pods are recovered (KubeRay recreates the pods, the job resumes from its checkpoint through Ray Train's
        FailureConfig) and every event during the job is in the result."""
        first = len(self.events)
        self.start_monitor()
        try:
            address = address or self.dashboard_address()
            outcome = run_job(address, entrypoint, timeout_s=timeout_s, auth_token=self.auth_token(), **job)
        finally:
            self.stop_monitor()
        return RunResult(job=outcome, events=self.events[first:])

    def _gone_by(self, deadline: float) -> bool:
        return _watch_until(self._watch_self(deadline), lambda w: not w.objects) and _watch_until(
            self._watch_pods(deadline), lambda w: not w.objects
        )

    def delete(self, timeout_s: float = 120.0) -> None:
        """Delete the RayCluster and wait until it and its pods are gone; force-delete stragglers.

        A handle that created its cluster deletes that object only (a UID precondition): a later attempt of
        the same run, which took the run's lease over (`day0.runs.lock`), makes a cluster of the same name,
        and a fenced attempt's teardown must leave it alone."""
        only = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=self.uid)) if self.uid else None
        try:
            self._custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, self.name, propagation_policy="Background", body=only
            )
        except ApiException as exc:
            if exc.status == 409 and self.uid:  # the precondition failed: the name is another cluster's now
                self.events.append(ClusterEvent(kind="deleted", message="already replaced by a later attempt's"))
                return
            if exc.status != 404:
                raise ClusterError(f"deleting RayCluster {self.name}: {_api_message(exc)}") from exc
        if not self._gone_by(time.monotonic() + timeout_s):
            for pod in self.pods():  # pods on dead nodes stay Terminating forever otherwise
                self._force_delete(pod.metadata.name)
            if not self._gone_by(time.monotonic() + 30):
                pods = [p.metadata.name for p in self.pods()]
                raise ClusterError(
                    f"RayCluster {self.name} not gone after {timeout_s:.0f} s: {len(pods)} pods left: {pods[:5]}"
                )
        self.events.append(ClusterEvent(kind="deleted"))

    def _force_delete(self, pod: str) -> None:
        try:
            self._core.delete_namespaced_pod(pod, self.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise


def delete_run_clusters(
    namespace: str, run_id: str | None = None, *, api_client: client.ApiClient | None = None
) -> list[str]:
    """Delete every day0 RayCluster in `namespace` (of one run, if given): the leak sweeper."""
    selector = "app.kubernetes.io/managed-by=day0" + (f",{RUN_ID_LABEL}={label_value(run_id)}" if run_id else "")
    api = _api_client(api_client)
    listed = cast(
        KubeObject,
        client.CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, label_selector=selector
        ),
    )
    names = [item["metadata"]["name"] for item in listed["items"]]
    for name in names:
        KubeRayCluster.attach(name, namespace, api_client=api).delete()
    return names


@contextmanager
def raycluster_session(
    cluster: ClusterSpec,
    run_id: str,
    *,
    api_client: client.ApiClient | None = None,
    wait: bool = True,
    **build: Unpack[BuildOptions],
) -> Iterator[KubeRayCluster]:
    """Create, wait Ready, yield; always delete on exit (error, cancellation too) unless `keep_cluster`."""
    rc = KubeRayCluster(build_raycluster(cluster, run_id, **build), api_client=api_client)
    try:
        rc.create()
        if wait:
            rc.wait_ready(cluster.ready_timeout_s)
        yield rc
    finally:
        rc.stop_monitor()
        if not cluster.keep_cluster:
            rc.delete()
