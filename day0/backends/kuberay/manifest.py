"""The RayCluster manifest for one run: plain dicts from the cluster spec's node pools and the plan.

Contracts:
- Pure: no API server, no kubernetes client; the same inputs give the same dict.
- `build_raycluster` is the one builder of the custom resource: a head group on CPU nodes
  (no accelerators, `num-cpus: 0`), one worker group per node pool (accelerator resource, one job
  driver slot, nodeSelector, tolerations, replicas/min/max), in-tree autoscaling when a pool is elastic,
  `app.kubernetes.io/*` labels and the run id on everything. The spec's own `ray_start_params`
  (cluster-wide, then per pool) win over day0's, and `pod_env` reaches every Ray container.
- Names are DNS-1035 labels, unique per run id and short enough for the names KubeRay derives.
- Sizing from a plan fills fixed pools first and overflows to elastic pools; a plan larger than
  the pools is a `ClusterError` that names the numbers.
- The store's credentials reach the Ray containers from a Kubernetes Secret (`cluster.store_secret`,
  secretKeyRef), never from the job's runtime env; the image is the spec's (it must hold day0).
- Every Ray pod is locked down (`_lock_down`): non-root, read-only root filesystem (an emptyDir on /tmp,
  where Ray keeps its session directories, and HOME there), no capabilities, no privilege escalation,
  RuntimeDefault seccomp, the spec's rightless service account (`cluster.service_account`) and no
  service-account token. The one exception is the in-tree autoscaler's container, which must call the
  API server: it alone mounts a token, of KubeRay's per-cluster autoscaler account, which is why a
  head with an autoscaler keeps that account.
- Ray's token authentication is on (`authOptions.mode: token`): KubeRay creates the cluster's token
  Secret (named after the cluster, key `auth_token`, owned by the RayCluster, so deleted with it) and gives
  every Ray container and the autoscaler `RAY_AUTH_MODE=token` and `RAY_AUTH_TOKEN` from it; the
  dashboard and its job API refuse a request without the token (401) or with a wrong one (403).
- The head's dashboard binds the pod's own address (`DAY0_POD_IP`, from the downward API), not
  0.0.0.0: Ray >= 2.53 gets KubeRay's httpGet probes on the dashboard agent at the pod IP, and
  nothing else in the pod calls the dashboard on localhost.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import TypedDict

from day0.backends.kuberay.status import ClusterError
from day0.backends.resources import DRIVER_RESOURCE
from day0.core.typing import KubeObject
from day0.spec.cluster import ClusterSpec, NodePool

__all__ = [
    "GROUP",
    "PLURAL",
    "RUN_ID_LABEL",
    "STORE_SECRET_ENV",
    "VERSION",
    "build_raycluster",
    "cluster_name",
    "default_image",
    "label_value",
    "labels",
    "plan_accelerators",
    "workers_for_pods",
    "workers_per_pool",
]

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
RUN_ID_LABEL = "day0.io/run-id"
MAX_NAME = 40  # KubeRay derives `<name>-head-svc` and pod names from it; keep room under 63


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
    return {
        "app.kubernetes.io/name": "day0",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "day0",
        "app.kubernetes.io/managed-by": "day0",
        RUN_ID_LABEL: label_value(run_id),
    }


# --- sizing from the plan ----------------------------------------------------------------------


def plan_accelerators(plan: object) -> int:
    """World size of a parallel plan (TP x PP x CP x DP; EP shards within DP): a mapping or object."""

    def get(key: str) -> int:
        value = plan.get(key) if isinstance(plan, Mapping) else getattr(plan, key, None)
        return int(value or 1)

    return math.prod(get(k) for k in ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel"))


def _nodes_without_plan(pool: NodePool) -> int:
    return pool.elastic.min if pool.elastic is not None else int(pool.nodes or 0)


def workers_per_pool(cluster: ClusterSpec, accelerators: int | None = None) -> dict[str, int]:
    """Worker pods (one per node) per pool: fixed pools first, overflow to elastic pools.

    Without a plan: every fixed node, and each elastic pool at its minimum."""
    if accelerators is None:
        return {p.name: _nodes_without_plan(p) for p in cluster.node_pools}
    left, out = accelerators, {}
    for pool in sorted(cluster.node_pools, key=lambda p: p.elastic is not None):
        take = min(math.ceil(max(left, 0) / pool.accelerator.per_node), pool.max_nodes)
        if pool.elastic is not None:
            take = max(take, pool.elastic.min)
        out[pool.name] = take
        left -= take * pool.accelerator.per_node
    if left > 0:
        have = ", ".join(f"{p.name}: {p.max_nodes} x {p.accelerator.per_node}" for p in cluster.node_pools)
        raise ClusterError(
            f"the plan needs {accelerators} accelerators; the node pools hold only "
            f"{accelerators - left} ({have or 'no node pools'})"
        )
    return {p.name: out[p.name] for p in cluster.node_pools}


def workers_for_pods(cluster: ClusterSpec, pods: int) -> dict[str, int]:
    """Worker pods per pool for a run whose steps need `pods` accelerator workers at trial scale:
    fixed pools fill first (only as many nodes as needed); elastic pools start at their minimum and
    the in-tree autoscaler adds nodes when the work asks for more. More than the pools can ever hold
    is an error naming the numbers."""
    most = sum(p.max_nodes for p in cluster.node_pools)
    if pods > most:
        have = ", ".join(f"{p.name}: {p.max_nodes}" for p in cluster.node_pools)
        raise ClusterError(f"the steps need {pods} worker nodes; the node pools hold at most {most} ({have})")
    left, out = pods, {}
    for pool in cluster.node_pools:
        if pool.elastic is None:
            out[pool.name] = min(left, pool.max_nodes)
            left -= out[pool.name]
    for pool in cluster.node_pools:
        if pool.elastic is not None:
            out[pool.name] = pool.elastic.min
    return {p.name: out[p.name] for p in cluster.node_pools}


# --- the builder -------------------------------------------------------------------------------


def _resources(cpus: float, memory_gib: float, extra: Mapping[str, int] | None = None) -> KubeObject:
    amounts: dict[str, str | int] = {"cpu": str(cpus), "memory": f"{int(memory_gib)}Gi", **(extra or {})}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _tolerations(pool: NodePool) -> list[KubeObject]:
    own = [t.model_dump(exclude_none=True) for t in pool.tolerations]
    if pool.accelerator.resource == "cpu":
        return own
    # GPU node pools are commonly tainted with their resource name (GKE, AKS): tolerate it.
    implied = {"key": pool.accelerator.resource, "operator": "Exists", "effect": "NoSchedule"}
    return own + ([implied] if implied not in own else [])


def _ray_start_params(pool: NodePool, cpus: int) -> dict[str, str]:
    acc = pool.accelerator
    params = {"num-cpus": str(cpus)}
    custom = {DRIVER_RESOURCE: 1}  # one job driver per worker pod: drivers never run on the head
    if acc.resource == "nvidia.com/gpu":
        params["num-gpus"] = str(acc.per_node)
    elif acc.resource != "cpu":  # a custom Ray resource named after the device (`Ascend910: 8`)
        custom[acc.resource.split("/")[-1]] = acc.per_node
    params["resources"] = json.dumps(json.dumps(custom))
    return params


def _worker_group(pool: NodePool, replicas: int, image: str, meta: dict[str, str]) -> KubeObject:
    acc = pool.accelerator
    if pool.elastic is None:
        low = high = replicas  # a fixed pool: the autoscaler must not resize it
    else:
        low, high = pool.elastic.min, pool.elastic.max
    cpus = max(1, pool.cpus_per_node - 2)  # leave room for daemonsets on the node
    extra = {acc.resource: acc.per_node} if acc.resource != "cpu" else None
    pod_spec: KubeObject = {
        "containers": [
            {"name": "ray-worker", "image": image, "resources": _resources(cpus, pool.memory_gib_per_node * 0.9, extra)}
        ],
        "nodeSelector": dict(pool.node_selector),
        "tolerations": _tolerations(pool),
    }
    return {
        "groupName": pool.name,
        "replicas": replicas,
        "minReplicas": low,
        "maxReplicas": high,
        "rayStartParams": _ray_start_params(pool, cpus),
        "template": {"metadata": {"labels": {**meta, "day0.io/pool": pool.name}}, "spec": pod_spec},
    }


POD_IP_ENV = "DAY0_POD_IP"


def _head_group(
    image: str,
    meta: dict[str, str],
    node_selector: Mapping[str, str],
    cpus: int,
    memory_gib: int,
    tolerations: list[KubeObject] | None = None,
) -> KubeObject:
    ports = [
        {"containerPort": 6379, "name": "gcs"},
        {"containerPort": 8265, "name": "dashboard"},
        {"containerPort": 10001, "name": "client"},
    ]
    container = {
        "name": "ray-head",
        "image": image,
        "ports": ports,
        "resources": _resources(cpus, memory_gib),
        "env": [{"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
    }
    return {
        # The pod's address only: the job API is reached through the head Service or the pod IP, never localhost.
        "rayStartParams": {"dashboard-host": f"$({POD_IP_ENV})", "num-cpus": "0"},
        "template": {
            "metadata": {"labels": {**meta, "app.kubernetes.io/component": "ray-head"}},
            "spec": {
                "nodeSelector": dict(node_selector),
                "containers": [container],
                **({"tolerations": tolerations} if tolerations else {}),
            },
        },
    }


class BuildOptions(TypedDict, total=False):
    """`build_raycluster`'s keyword arguments, as a caller that forwards them (`raycluster_session`) takes them."""

    plan: object
    workers: Mapping[str, int] | None
    image: str | None
    head_node_selector: Mapping[str, str] | None
    head_cpus: int | None
    head_memory_gib: int | None


def build_raycluster(
    cluster: ClusterSpec,
    run_id: str,
    *,
    plan: object = None,
    workers: Mapping[str, int] | None = None,
    image: str | None = None,
    head_node_selector: Mapping[str, str] | None = None,
    head_cpus: int | None = None,
    head_memory_gib: int | None = None,
) -> KubeObject:
    """The RayCluster manifest for one run. `workers` (per pool) overrides sizing from `plan`;
    the head follows `cluster.head` unless the `head_*` arguments override it."""
    if not cluster.node_pools:
        raise ClusterError("cluster.node_pools is empty: the kuberay backend needs at least one pool")
    if workers is None:
        workers = workers_per_pool(cluster, plan_accelerators(plan) if plan is not None else None)
    unknown = set(workers) - {p.name for p in cluster.node_pools}
    if unknown:
        raise ClusterError(f"workers given for unknown pools {sorted(unknown)}")
    name = cluster_name(run_id)
    image = image or cluster.image or default_image()
    meta = labels(run_id, name)
    spec: KubeObject = {
        "rayVersion": _ray_version(),
        "headGroupSpec": _head_group(
            image,
            meta,
            cluster.head.node_selector if head_node_selector is None else head_node_selector,
            head_cpus or cluster.head.cpus,
            head_memory_gib or cluster.head.memory_gib,
            [t.model_dump(exclude_none=True) for t in cluster.head.tolerations],
        ),
        "workerGroupSpecs": [_worker_group(p, workers.get(p.name, 0), image, meta) for p in cluster.node_pools],
        # KubeRay creates the token Secret and puts the token in every Ray container and the autoscaler.
        "authOptions": {"mode": "token"},
    }
    if any(p.elastic is not None for p in cluster.node_pools):
        spec["enableInTreeAutoscaling"] = True
        spec["autoscalerOptions"] = {
            "upscalingMode": "Default",
            "idleTimeoutSeconds": 120,
            "resources": _resources(1, 1),
        }
    _apply_pod_options(spec, cluster)
    _lock_down(spec, cluster)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace,
            "labels": meta,
            "annotations": {RUN_ID_LABEL: run_id},
        },
        "spec": spec,
    }


# The store's credentials as the Ray containers see them: the names `day0.store` reads, from the keys
# of the Secret the Helm chart's `store.existingSecret` also holds.
STORE_SECRET_ENV = {"DAY0_STORE_ACCESS_KEY_ID": "access-key-id", "DAY0_STORE_SECRET_ACCESS_KEY": "secret-access-key"}


def _store_env(secret: str | None) -> list[KubeObject]:
    if secret is None:
        return []
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for name, key in STORE_SECRET_ENV.items()
    ]


def _apply_pod_options(spec: KubeObject, cluster: ClusterSpec) -> None:
    """The spec's own `ray start` flags (cluster-wide, then per pool) and container environment; the
    store's credentials from `cluster.store_secret` in the head and worker containers."""
    env = [
        {"name": e.name, "value": e.value}
        if e.field_path is None
        else {"name": e.name, "valueFrom": {"fieldRef": {"fieldPath": e.field_path}}}
        for e in cluster.pod_env
    ]
    pools = {p.name: p for p in cluster.node_pools}
    spec["headGroupSpec"]["rayStartParams"].update(cluster.ray_start_params)
    for group in spec["workerGroupSpecs"]:
        group["rayStartParams"].update({**cluster.ray_start_params, **pools[group["groupName"]].ray_start_params})
    ray_env = [*env, *_store_env(cluster.store_secret)]
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        for container in group["template"]["spec"]["containers"]:
            if ray_env:
                container["env"] = [*container.get("env", []), *ray_env]
    if env and "autoscalerOptions" in spec:  # the autoscaler reads no store
        spec["autoscalerOptions"]["env"] = list(env)


POD_SECURITY: KubeObject = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY: KubeObject = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
_TMP = "tmp"
_AUTOSCALER_TOKEN = "autoscaler-token"
# What the kubelet mounts for an automounted token, here for the autoscaler's container only.
_TOKEN_VOLUME: KubeObject = {
    "name": _AUTOSCALER_TOKEN,
    "projected": {
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ]
    },
}


def _lock_down(spec: KubeObject, cluster: ClusterSpec) -> None:
    autoscaled = "autoscalerOptions" in spec
    own_home = not any(e.name == "HOME" for e in cluster.pod_env)
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        pod = group["template"]["spec"]
        is_head = group is spec["headGroupSpec"]
        pod["securityContext"] = dict(POD_SECURITY)
        pod["automountServiceAccountToken"] = False
        if cluster.service_account is not None and not (is_head and autoscaled):
            pod["serviceAccountName"] = cluster.service_account
        pod["volumes"] = [{"name": _TMP, "emptyDir": {}}, *([_TOKEN_VOLUME] if is_head and autoscaled else [])]
        for container in pod["containers"]:
            container["securityContext"] = dict(CONTAINER_SECURITY)
            container["volumeMounts"] = [{"name": _TMP, "mountPath": "/tmp"}]
            if own_home:
                container["env"] = [{"name": "HOME", "value": "/tmp"}, *container.get("env", [])]
    if autoscaled:
        spec["autoscalerOptions"]["securityContext"] = dict(CONTAINER_SECURITY)
        spec["autoscalerOptions"]["volumeMounts"] = [
            {"name": _TMP, "mountPath": "/tmp"},
            {"name": _AUTOSCALER_TOKEN, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True},
        ]


def default_image() -> str:
    """The image `make image` builds by default: day0 (the jobs run `python -m day0...`) with Ray."""
    from day0 import __version__

    return f"day0:{__version__}"


def _ray_version() -> str:
    """The Ray the jobs are submitted with, which the image must match (KubeRay's `rayVersion`)."""
    from importlib.metadata import version

    return version("ray")
