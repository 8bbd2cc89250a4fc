"""What the API server says about a run's cluster, and what day0 records about it.

Contracts:
- Pure readers of API objects (no calls): readiness from `status.conditions` (KubeRay's
  `HeadPodReady`, `ReplicaFailure` and `readyWorkerReplicas`; the deprecated `status.state` only
  when an operator reports no conditions), pod and node readiness, and why a pod is Pending in
  the scheduler's own words.
- The vocabulary shared by the builder, the lifecycle and the monitor: `ClusterError` (its message
  says what is short where), `ClusterEvent` (kept in step results) and `PoolReport`.
Pods and nodes are `kubernetes.client` models (`V1Pod`, `V1Node`); RayClusters are plain dicts.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from pydantic import BaseModel, Field

from day0.core.typing import KubeObject
from day0.errors import Day0Error

if TYPE_CHECKING:
    from kubernetes.client import V1NodeCondition, V1PodCondition

__all__ = [
    "CLUSTER_LABEL",
    "GROUP_LABEL",
    "NODE_TYPE_LABEL",
    "ClusterError",
    "ClusterEvent",
    "EventKind",
    "Node",
    "Pod",
    "PoolReport",
    "node_ready",
    "pod_group",
    "pod_ready",
    "pool_reports",
    "raycluster_ready",
    "unschedulable",
]

# kubernetes.client.V1Pod and V1Node, read as the API server fills them (the models type every field optional).
Pod: TypeAlias = Any
Node: TypeAlias = Any

# Labels KubeRay puts on every pod it creates.
CLUSTER_LABEL = "ray.io/cluster"
GROUP_LABEL = "ray.io/group"
NODE_TYPE_LABEL = "ray.io/node-type"

EventKind = Literal[
    "created",
    "ready",
    "scale-up",
    "node-lost",
    "pod-lost",
    "pod-replaced",
    "recovered",
    "deleted",
    "warning",
    "job-resubmitted",  # a step's job whose driver's node was lost, submitted again (day0.backends.session)
]


class ClusterError(Day0Error):
    """The cluster could not be sized, created, made Ready or deleted; the message says what is short where."""


class ClusterEvent(BaseModel):
    """Something that happened to the cluster during a run: kept in the step result."""

    kind: EventKind
    at: float = Field(default_factory=time.time, description="Unix time, seconds.")
    pool: str | None = None
    pod: str | None = None
    node: str | None = None
    message: str = ""


class PoolReport(BaseModel):
    """Scheduling state of one worker group, for readiness errors and progress."""

    pool: str
    desired: int
    pods: int
    ready: int
    pending: int
    reasons: list[str] = Field(default=[])

    def __str__(self) -> str:
        why = f": {'; '.join(self.reasons)}" if self.reasons else ""
        return f"pool {self.pool!r}: {self.ready}/{self.desired} Ready, {self.pods} pods, {self.pending} Pending{why}"


def raycluster_ready(obj: KubeObject | None, desired_workers: int) -> bool:
    """Head Ready and every desired worker Ready; a `ReplicaFailure` condition raises `ClusterError`."""
    status = (obj or {}).get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    failure = conds.get("ReplicaFailure")
    if failure and failure.get("status") == "True":
        name = (obj or {}).get("metadata", {}).get("name", "?")
        raise ClusterError(f"RayCluster {name}: {failure.get('reason')}: {failure.get('message')}")
    head = conds.get("HeadPodReady", {}).get("status") == "True" if conds else status.get("state") == "ready"
    return head and int(status.get("readyWorkerReplicas") or 0) >= desired_workers


def _condition(obj: Pod | Node, kind: str) -> V1PodCondition | V1NodeCondition | None:
    return next((c for c in (obj.status.conditions or []) if c.type == kind), None)


def pod_ready(pod: Pod) -> bool:
    cond = _condition(pod, "Ready")
    return pod.status.phase == "Running" and cond is not None and cond.status == "True"


def node_ready(node: Node) -> bool:
    cond = _condition(node, "Ready")
    return cond is not None and cond.status == "True"


def pod_group(pod: Pod) -> str | None:
    """`head` for the head pod, else the worker group (node pool) KubeRay labelled it with."""
    meta = pod.metadata.labels or {}
    return "head" if meta.get(NODE_TYPE_LABEL) == "head" else meta.get(GROUP_LABEL)


def unschedulable(pod: Pod) -> str | None:
    """`short of nvidia.com/gpu (0/9 nodes are available: ...)` for a Pending, unschedulable pod."""
    cond = _condition(pod, "PodScheduled")
    if pod.status.phase != "Pending" or cond is None or cond.status != "False":
        return None
    message = (cond.message or cond.reason or "unschedulable").strip()
    short = sorted(set(re.findall(r"Insufficient ([\w./-]*[\w/-])", message)))
    head = f"short of {', '.join(short)}" if short else "no matching node"
    found = re.match(r"\d+/\d+ nodes are available: .*?(?=\.(\s|$))", message)  # drop preemption/DRA notes
    return f"{head} ({found.group(0) if found else message})"


def pool_reports(pods: Iterable[Pod], manifest: KubeObject) -> list[PoolReport]:
    """The groups (head first) that are short of Ready pods or have Pending pods, with the scheduler's reasons.

    No pods at all means the operator made none: reported on the head."""
    pods = list(pods)
    if not pods:
        namespace = manifest.get("metadata", {}).get("namespace")
        why = f"KubeRay created no pods: is the operator running and watching namespace {namespace!r}?"
        return [PoolReport(pool="head", desired=1, pods=0, ready=0, pending=0, reasons=[why])]
    groups = [("head", 1)] + [
        (g["groupName"], int(g.get("replicas", 0))) for g in manifest.get("spec", {}).get("workerGroupSpecs", [])
    ]
    reports = []
    for group, desired in groups:
        mine = [p for p in pods if pod_group(p) == group]
        reasons = sorted({r for p in mine if (r := unschedulable(p))})
        reports.append(
            PoolReport(
                pool=group,
                desired=desired,
                pods=len(mine),
                ready=sum(map(pod_ready, mine)),
                pending=sum(p.status.phase == "Pending" for p in mine),
                reasons=reasons,
            )
        )
    return [r for r in reports if r.ready < r.desired or r.reasons]
