"""KubeRay backend: one RayCluster per run, built from the spec's node pools and the plan.

Contracts:
- `build_raycluster` is the one builder of the custom resource (plain dicts): head group on CPU
  nodes, one worker group per node pool (accelerator resource, nodeSelector, tolerations,
  replicas/min/max), in-tree autoscaling when a pool is elastic, `app.kubernetes.io/*` labels
  and the run id on everything. Names are DNS-safe and unique per run.
- `KubeRayCluster` creates it, watches it until Ready (conditions, not the deprecated state),
  explains what is short when it is not, detects lost nodes/pods and recovers by force-deleting
  the dead pods so KubeRay recreates them elsewhere; every such event lands in `.events`.
- `raycluster_session` always deletes the cluster on exit (success, error, cancellation) unless
  `ClusterSpec.keep_cluster`; `delete_run_clusters` sweeps leftovers by label.
Job submission to the head goes through `day0.backends.jobs` (shared with the local backend).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

from pydantic import BaseModel, Field

from day0.backends.jobs import JobOutcome, run_job
from day0.errors import Day0Error
from day0.spec import ClusterSpec, NodePool

__all__ = [
    "ClusterError", "ClusterEvent", "KubeRayCluster", "PoolReport", "RunResult", "build_raycluster", "cluster_name",
    "delete_run_clusters", "label_value", "labels", "plan_accelerators", "raycluster_session",
    "workers_per_pool",
]

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
RUN_ID_LABEL = "day0.io/run-id"
CLUSTER_LABEL = "ray.io/cluster"  # KubeRay puts it on every pod it creates
GROUP_LABEL = "ray.io/group"
NODE_TYPE_LABEL = "ray.io/node-type"
MAX_NAME = 40  # KubeRay derives `<name>-head-svc` and pod names from it; keep room under 63


class ClusterError(Day0Error):
    """The cluster could not be created, made Ready or deleted; the message says what is short where."""


class ClusterEvent(BaseModel):
    """Something that happened to the cluster during a run: kept in the step result."""

    kind: Literal["created", "ready", "node-lost", "pod-lost", "pod-replaced", "recovered", "deleted", "warning"]
    at: float = Field(default_factory=time.time, description="Unix time, seconds.")
    pool: str | None = None
    pod: str | None = None
    node: str | None = None
    message: str = ""


class RunResult(BaseModel):
    """A job run on the cluster and what happened to the cluster meanwhile."""

    job: JobOutcome
    events: list[ClusterEvent] = Field(default_factory=list)


class PoolReport(BaseModel):
    """Scheduling state of one worker group, for readiness errors and progress."""

    pool: str
    desired: int
    pods: int
    ready: int
    pending: int
    reasons: list[str] = Field(default_factory=list)

    def __str__(self) -> str:
        why = f": {'; '.join(self.reasons)}" if self.reasons else ""
        return f"pool {self.pool!r}: {self.ready}/{self.desired} Ready, {self.pods} pods, {self.pending} Pending{why}"


# --- names and labels --------------------------------------------------------------------------

def _digest(text: str, n: int = 6) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def label_value(text: str) -> str:
    """A valid label value (<=63 chars of [A-Za-z0-9_.-], alphanumeric ends) that stays unique."""
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    if clean == text and len(clean) <= 63:
        return clean
    return f"{clean[:56].rstrip('-_.')}-{_digest(text)}".lstrip("-")


def cluster_name(run_id: str, prefix: str = "day0") -> str:
    """`day0-<run>-<hash>`: a DNS-1035 label, unique per run id, short enough for KubeRay."""
    base = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")
    base = re.sub(r"^[0-9-]+", "", base)
    room = MAX_NAME - len(prefix) - 8
    return "-".join(p for p in (prefix, base[:room].rstrip("-"), _digest(run_id)) if p)


def labels(run_id: str, name: str, component: str = "ray-cluster") -> dict[str, str]:
    """Standard `app.kubernetes.io/*` labels plus the flow run id."""
    return {"app.kubernetes.io/name": "day0", "app.kubernetes.io/instance": name,
            "app.kubernetes.io/component": component, "app.kubernetes.io/part-of": "day0",
            "app.kubernetes.io/managed-by": "day0", RUN_ID_LABEL: label_value(run_id)}


# --- sizing from the plan ----------------------------------------------------------------------

def plan_accelerators(plan: Any) -> int:
    """World size of a parallel plan (TP x PP x CP x DP; EP shards within DP): a mapping or object."""
    def get(key: str) -> int:
        value = plan.get(key) if isinstance(plan, Mapping) else getattr(plan, key, None)
        return int(value or 1)
    return math.prod(get(k) for k in ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel"))


def workers_per_pool(cluster: ClusterSpec, accelerators: int | None = None) -> dict[str, int]:
    """Worker pods (one per node) per pool: fixed pools first, overflow to elastic pools.

    Without a plan: every fixed node, and each elastic pool at its minimum."""
    if accelerators is None:
        return {p.name: p.nodes if p.nodes is not None else p.elastic.min  # type: ignore[union-attr]
                for p in cluster.node_pools}
    left, out = accelerators, {}
    for pool in sorted(cluster.node_pools, key=lambda p: p.elastic is not None):
        take = min(math.ceil(max(left, 0) / pool.accelerator.per_node), pool.max_nodes)
        if pool.elastic is not None:
            take = max(take, pool.elastic.min)
        out[pool.name] = take
        left -= take * pool.accelerator.per_node
    if left > 0:
        have = ", ".join(f"{p.name}: {p.max_nodes} x {p.accelerator.per_node}" for p in cluster.node_pools)
        raise ClusterError(f"the plan needs {accelerators} accelerators; the node pools hold only "
                           f"{accelerators - left} ({have or 'no node pools'})")
    return {p.name: out[p.name] for p in cluster.node_pools}


# --- the builder -------------------------------------------------------------------------------

def _resources(cpus: float, memory_gib: float, extra: Mapping[str, int] | None = None) -> dict[str, Any]:
    amounts: dict[str, Any] = {"cpu": str(cpus), "memory": f"{int(memory_gib)}Gi", **(extra or {})}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _tolerations(pool: NodePool) -> list[dict[str, Any]]:
    # GPU node pools are commonly tainted with their resource name (GKE, AKS): tolerate it.
    own = [t.model_dump(exclude_none=True) for t in pool.tolerations]
    implied = {"key": pool.accelerator.resource, "operator": "Exists", "effect": "NoSchedule"}
    return own + ([implied] if implied not in own else [])


def _worker_group(pool: NodePool, replicas: int, image: str, meta: dict[str, str]) -> dict[str, Any]:
    acc = pool.accelerator
    if pool.elastic is None:
        low = high = replicas  # a fixed pool: the autoscaler must not resize it
    else:
        low, high = pool.elastic.min, pool.elastic.max
    cpus = max(1, pool.cpus_per_node - 2)  # leave room for daemonsets on the node
    params = {"num-cpus": str(cpus)}
    if acc.resource == "nvidia.com/gpu":
        params["num-gpus"] = str(acc.per_node)
    elif acc.resource != "cpu":
        params["resources"] = json.dumps(json.dumps({acc.resource.split("/")[-1]: acc.per_node}))
    extra = {acc.resource: acc.per_node} if acc.resource != "cpu" else None
    pod_spec: dict[str, Any] = {
        "containers": [{"name": "ray-worker", "image": image,
                        "resources": _resources(cpus, pool.memory_gib_per_node * 0.9, extra)}],
        "nodeSelector": dict(pool.node_selector),
        "tolerations": _tolerations(pool) if acc.resource != "cpu" else
        [t.model_dump(exclude_none=True) for t in pool.tolerations],
    }
    return {"groupName": pool.name, "replicas": replicas, "minReplicas": low, "maxReplicas": high,
            "rayStartParams": params,
            "template": {"metadata": {"labels": {**meta, "day0.io/pool": pool.name}}, "spec": pod_spec}}


def build_raycluster(cluster: ClusterSpec, run_id: str, *, plan: Any = None,
                     workers: Mapping[str, int] | None = None, image: str | None = None,
                     head_node_selector: Mapping[str, str] | None = None,
                     head_cpus: int = 2, head_memory_gib: int = 8) -> dict[str, Any]:
    """The RayCluster manifest for one run. `workers` (per pool) overrides sizing from `plan`."""
    if not cluster.node_pools:
        raise ClusterError("cluster.node_pools is empty: the kuberay backend needs at least one pool")
    if workers is None:
        workers = workers_per_pool(cluster, plan_accelerators(plan) if plan is not None else None)
    unknown = set(workers) - {p.name for p in cluster.node_pools}
    if unknown:
        raise ClusterError(f"workers given for unknown pools {sorted(unknown)}")
    name = cluster_name(run_id)
    image = image or _default_image()
    meta = labels(run_id, name)
    head = {"rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0"},
            "template": {"metadata": {"labels": {**meta, "app.kubernetes.io/component": "ray-head"}},
                         "spec": {"nodeSelector": dict(head_node_selector or {}),
                                  "containers": [{"name": "ray-head", "image": image,
                                                  "ports": [{"containerPort": 6379, "name": "gcs"},
                                                            {"containerPort": 8265, "name": "dashboard"},
                                                            {"containerPort": 10001, "name": "client"}],
                                                  "resources": _resources(head_cpus, head_memory_gib)}]}}}
    spec: dict[str, Any] = {
        "rayVersion": image.split(":")[-1].split("-")[0],
        "headGroupSpec": head,
        "workerGroupSpecs": [_worker_group(p, workers.get(p.name, 0), image, meta) for p in cluster.node_pools],
    }
    if any(p.elastic is not None for p in cluster.node_pools):
        spec["enableInTreeAutoscaling"] = True
        spec["autoscalerOptions"] = {"upscalingMode": "Default", "idleTimeoutSeconds": 120,
                                     "resources": _resources(1, 1)}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RayCluster",
            "metadata": {"name": name, "namespace": cluster.namespace, "labels": meta,
                         "annotations": {"day0.io/run-id": run_id}},
            "spec": spec}


def _default_image() -> str:
    import ray

    return f"rayproject/ray:{ray.__version__}-py311"


# --- the live cluster --------------------------------------------------------------------------

def _api_client(api_client: Any) -> Any:
    if api_client is not None:
        return api_client
    from kubernetes import config

    try:
        return config.new_client_from_config()  # $KUBECONFIG or ~/.kube/config
    except config.ConfigException:
        config.load_incluster_config()
        from kubernetes import client

        return client.ApiClient()


def _api_message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message", exc.reason))
    except (TypeError, ValueError, AttributeError):
        return str(getattr(exc, "reason", exc))


def _condition(obj: Any, kind: str) -> Any:
    return next((c for c in (obj.status.conditions or []) if c.type == kind), None)


def _pod_ready(pod: Any) -> bool:
    cond = _condition(pod, "Ready")
    return pod.status.phase == "Running" and cond is not None and cond.status == "True"


def _node_ready(node: Any) -> bool:
    cond = _condition(node, "Ready")
    return cond is not None and cond.status == "True"


def _unschedulable(pod: Any) -> str | None:
    """`short of nvidia.com/gpu (0/9 nodes are available: ...)` for a Pending, unschedulable pod."""
    cond = _condition(pod, "PodScheduled")
    if pod.status.phase != "Pending" or cond is None or cond.status != "False":
        return None
    message = (cond.message or cond.reason or "unschedulable").strip()
    short = sorted(set(re.findall(r"Insufficient ([\w./-]*[\w/-])", message)))
    head = f"short of {', '.join(short)}" if short else "no matching node"
    found = re.match(r"\d+/\d+ nodes are available: .*?(?=\.(\s|$))", message)  # drop preemption/DRA notes
    return f"{head} ({found.group(0) if found else message})"


class KubeRayCluster:
    """A RayCluster on the API server: create, wait Ready, monitor failures, delete."""

    def __init__(self, manifest: dict[str, Any], *, api_client: Any = None) -> None:
        from kubernetes import client

        self.manifest = manifest
        self.name: str = manifest["metadata"]["name"]
        self.namespace: str = manifest["metadata"]["namespace"]
        api = _api_client(api_client)
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self.events: list[ClusterEvent] = []
        self._known: dict[str, Any] | None = None  # pod uid -> pod, from the last failure check
        self._handled: set[str] = set()
        self._lost_nodes: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def attach(cls, name: str, namespace: str, *, api_client: Any = None) -> KubeRayCluster:
        """A handle on an existing RayCluster (for teardown sweeps)."""
        return cls({"metadata": {"name": name, "namespace": namespace}}, api_client=api_client)

    # -- lifecycle --
    def create(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.manifest)
        except ApiException as exc:
            hint = {404: f"namespace {self.namespace!r} or the RayCluster CRD ({GROUP}/{VERSION}) is missing: "
                         "install KubeRay's CRDs", 409: "a RayCluster of that name already exists",
                    422: "the API server rejected the manifest"}.get(exc.status, f"HTTP {exc.status}")
            raise ClusterError(f"creating RayCluster {self.namespace}/{self.name}: {hint}: {_api_message(exc)}") from exc
        self.events.append(ClusterEvent(kind="created", message=f"{self.desired_workers()} workers requested"))

    def get(self) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def desired_workers(self) -> int:
        return sum(int(g.get("replicas", 0)) for g in self.manifest.get("spec", {}).get("workerGroupSpecs", []))

    def pods(self) -> list[Any]:
        return self._core.list_namespaced_pod(self.namespace, label_selector=f"{CLUSTER_LABEL}={self.name}").items

    def _ready(self, obj: dict[str, Any] | None) -> bool:
        status = (obj or {}).get("status") or {}
        conds = {c.get("type"): c for c in status.get("conditions") or []}
        failure = conds.get("ReplicaFailure")
        if failure and failure.get("status") == "True":
            raise ClusterError(f"RayCluster {self.name}: {failure.get('reason')}: {failure.get('message')}")
        head = conds.get("HeadPodReady", {}).get("status") == "True" if conds else status.get("state") == "ready"
        return head and int(status.get("readyWorkerReplicas") or 0) >= self.desired_workers()

    def wait_ready(self, timeout_s: float, *, poll_s: float = 2.0) -> float:
        """Block until head and all workers are Ready (watching the RayCluster); return seconds taken.

        On timeout, `ClusterError` names each pool that is short and the resource it lacks."""
        from kubernetes import watch

        start = time.monotonic()
        if self._ready(self.get()):
            return self._mark_ready(start)
        while (left := timeout_s - (time.monotonic() - start)) > 0:
            stream = watch.Watch().stream(
                self._custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL,
                field_selector=f"metadata.name={self.name}", timeout_seconds=max(1, int(min(left, 30))))
            for event in stream:
                if event["type"] == "DELETED":
                    raise ClusterError(f"RayCluster {self.namespace}/{self.name} was deleted while waiting")
                if self._ready(event["object"]):
                    return self._mark_ready(start)
            time.sleep(min(poll_s, max(left, 0)))
        raise ClusterError(f"RayCluster {self.namespace}/{self.name} not Ready after {timeout_s:.0f} s: "
                           + "; ".join(str(r) for r in self.pool_reports()))

    def _mark_ready(self, start: float) -> float:
        took = time.monotonic() - start
        self.events.append(ClusterEvent(kind="ready", message=f"{self.desired_workers()} workers Ready in {took:.1f} s"))
        return took

    def pool_reports(self) -> list[PoolReport]:
        """Per worker group (and the head): desired, pods, Ready, Pending, and why they are Pending."""
        pods = self.pods()
        groups = [("head", 1)] + [(g["groupName"], int(g.get("replicas", 0)))
                                  for g in self.manifest.get("spec", {}).get("workerGroupSpecs", [])]
        if not pods:
            return [PoolReport(pool="head", desired=1, pods=0, ready=0, pending=0,
                               reasons=[f"KubeRay created no pods: is the operator running and watching "
                                        f"namespace {self.namespace!r}?"])]
        reports = []
        for group, desired in groups:
            mine = [p for p in pods if (p.metadata.labels or {}).get(NODE_TYPE_LABEL) == "head"] if group == "head" \
                else [p for p in pods if (p.metadata.labels or {}).get(GROUP_LABEL) == group
                      and (p.metadata.labels or {}).get(NODE_TYPE_LABEL) != "head"]
            reasons = sorted({r for p in mine if (r := _unschedulable(p))})
            reports.append(PoolReport(pool=group, desired=desired, pods=len(mine), ready=sum(map(_pod_ready, mine)),
                                      pending=sum(p.status.phase == "Pending" for p in mine), reasons=reasons))
        return [r for r in reports if r.ready < r.desired or r.reasons]

    # -- failures --
    def check_failures(self, *, recover: bool = True) -> list[ClusterEvent]:
        """One sweep: pods on deleted/NotReady nodes, failed or vanished pods, replacements scheduled.

        With `recover`, pods on lost nodes are force-deleted (their kubelet will never confirm), so
        KubeRay recreates them at once and the scheduler places them on a healthy node."""
        pods = {p.metadata.uid: p for p in self.pods()}
        nodes = {n.metadata.name: n for n in self._core.list_node().items}
        baseline, new = self._known is None, []
        for uid, pod in pods.items():
            where, pool = pod.spec.node_name, (pod.metadata.labels or {}).get(GROUP_LABEL)
            if uid in self._handled:
                continue
            if where and (where not in nodes or not _node_ready(nodes[where])):
                why = "deleted" if where not in nodes else "NotReady"
                new.append(ClusterEvent(kind="node-lost", pool=pool, pod=pod.metadata.name, node=where,
                                        message=f"node {where} {why}; pod {pod.metadata.name} lost"))
                self._handled.add(uid)
                if recover:
                    self._force_delete(pod.metadata.name)
            elif pod.status.phase == "Failed":
                new.append(ClusterEvent(kind="pod-lost", pool=pool, pod=pod.metadata.name, node=where,
                                        message=f"pod failed: {pod.status.reason or pod.status.message or ''}"))
                self._handled.add(uid)
                if recover:
                    self._force_delete(pod.metadata.name)
            elif not baseline and where and uid not in (self._known or {}):
                new.append(ClusterEvent(kind="pod-replaced", pool=pool, pod=pod.metadata.name, node=where,
                                        message=f"pod {pod.metadata.name} scheduled on {where}"))
        for uid, pod in (self._known or {}).items():
            if uid not in pods and uid not in self._handled:
                new.append(ClusterEvent(kind="pod-lost", pool=(pod.metadata.labels or {}).get(GROUP_LABEL),
                                        pod=pod.metadata.name, node=pod.spec.node_name, message="pod deleted"))
                self._handled.add(uid)
        # Only scheduled pods count as known, so a replacement is reported once it has a node.
        self._known = {u: p for u, p in pods.items() if p.spec.node_name or baseline}
        self.events.extend(new)
        return new

    def _force_delete(self, pod: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self._core.delete_namespaced_pod(pod, self.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def start_monitor(self, interval_s: float = 2.0) -> None:
        """Check for failures in the background while a job runs (events go to `.events`)."""
        if self._thread is not None:
            return
        self.check_failures()  # baseline
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.check_failures()
                except Exception as exc:  # an API hiccup must not kill the monitor
                    self.events.append(ClusterEvent(kind="warning", message=f"failure check failed: {exc}"))

        self._thread = threading.Thread(target=loop, name=f"monitor-{self.name}", daemon=True)
        self._thread.start()

    def stop_monitor(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None

    def wait_recovered(self, timeout_s: float, *, poll_s: float = 1.0) -> float:
        """After a loss: wait until every group has its Ready pods again (checked on the pods
        themselves: the RayCluster status can lag a deletion); records a `recovered` event."""
        start = time.monotonic()
        while (reports := self.pool_reports()) or not self._ready(self.get()):
            if time.monotonic() - start > timeout_s:
                raise ClusterError(f"RayCluster {self.name} not recovered after {timeout_s:.0f} s: "
                                   + "; ".join(map(str, reports)))
            time.sleep(poll_s)
        took = time.monotonic() - start
        self.events.append(ClusterEvent(kind="recovered", message=f"all workers Ready again in {took:.1f} s"))
        return took

    def dashboard_address(self) -> str:
        """The head's job API inside the cluster (KubeRay's `<name>-head-svc` service)."""
        return f"http://{self.name}-head-svc.{self.namespace}.svc.cluster.local:8265"

    def run_job(self, entrypoint: str, *, timeout_s: float, address: str | None = None,
                monitor_interval_s: float = 2.0, **job: Any) -> RunResult:
        """Run a Ray job on the head while watching the cluster; lost nodes/pods are recovered
        (KubeRay recreates the pods, the job resumes from its checkpoint through Ray Train's
        FailureConfig) and every event during the job is in the result."""
        first = len(self.events)
        self.start_monitor(monitor_interval_s)
        try:
            outcome = run_job(address or self.dashboard_address(), entrypoint, timeout_s=timeout_s, **job)
        finally:
            self.stop_monitor()
        return RunResult(job=outcome, events=self.events[first:])

    def delete(self, timeout_s: float = 120.0) -> None:
        """Delete the RayCluster and wait until it and its pods are gone; force-delete stragglers."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name,
                                                         propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise ClusterError(f"deleting RayCluster {self.name}: {_api_message(exc)}") from exc
        deadline = time.monotonic() + timeout_s
        forced = False
        while True:
            pods = self.pods()
            if self.get() is None and not pods:
                break
            if time.monotonic() > deadline:
                if forced:
                    raise ClusterError(f"RayCluster {self.name} not gone after {timeout_s:.0f} s: "
                                       f"{len(pods)} pods left: {[p.metadata.name for p in pods][:5]}")
                for pod in pods:  # pods on dead nodes stay Terminating forever otherwise
                    self._force_delete(pod.metadata.name)
                forced, deadline = True, time.monotonic() + 30
            time.sleep(1.0)
        self.events.append(ClusterEvent(kind="deleted"))


def delete_run_clusters(namespace: str, run_id: str | None = None, *, api_client: Any = None) -> list[str]:
    """Delete every day0 RayCluster in `namespace` (of one run, if given): the leak sweeper."""
    from kubernetes import client

    selector = "app.kubernetes.io/managed-by=day0" + (f",{RUN_ID_LABEL}={label_value(run_id)}" if run_id else "")
    api = _api_client(api_client)
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, label_selector=selector)["items"]
    names = [item["metadata"]["name"] for item in items]
    for name in names:
        KubeRayCluster.attach(name, namespace, api_client=api).delete()
    return names


@contextmanager
def raycluster_session(cluster: ClusterSpec, run_id: str, *, api_client: Any = None, wait: bool = True,
                       **build: Any) -> Iterator[KubeRayCluster]:
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
