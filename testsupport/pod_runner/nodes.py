"""The runner's Nodes: pools of them, their manifests, status heartbeats and `kube-node-lease` Leases.

Why: the scheduler places pods by the Node's labels, taints and allocatable resources, and the
node lifecycle controller evicts pods from a Node whose Lease stops being renewed; a kubelet
keeps both fresh. These Nodes carry no `kwok.x-k8s.io/node` annotation, so kwok leaves them alone.
Each Node has its own loopback address (127.x.y.z) as InternalIP: the pods' hostIP.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["RUNNER_LABEL", "Pool", "lease_manifest", "node_manifest", "node_status", "parse_pool", "parse_taint"]

RUNNER_LABEL = "day0.io/pod-runner"
POOL_LABEL = "day0.io/pool"
KUBELET_VERSION = "v1.36.3-day0-pod-runner"


def parse_taint(text: str) -> dict[str, str]:
    """`key[=value]:Effect` -> a taint."""
    key_value, sep, effect = text.rpartition(":")
    if not sep or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise ValueError(f"taint {text!r}: expected key[=value]:NoSchedule|PreferNoSchedule|NoExecute")
    key, _, value = key_value.partition("=")
    return {"key": key, "effect": effect, **({"value": value} if value else {})}


class Pool(BaseModel):
    """A group of alike Nodes the runner registers: `<name>-<i>`, labelled `day0.io/pool=<name>`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$", description="Pool name, a DNS label.")
    count: int = Field(1, ge=0, le=64, description="Nodes created at start.")
    cpus: int = Field(4, ge=1, description="CPU capacity per node (not enforced).")
    memory_gib: int = Field(8, ge=1, description="Memory capacity per node, GiB (not enforced).")
    max_pods: int = Field(16, ge=1, description="Pod capacity per node.")
    resources: dict[str, int] = Field(
        default_factory=dict, description="Extended resources per node, e.g. {'day0.io/accel': 1}."
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Extra node labels.")
    taints: list[str] = Field(default_factory=list, description="Taints as key[=value]:Effect.")

    @field_validator("taints")
    @classmethod
    def _taints_parse(cls, taints: list[str]) -> list[str]:
        for taint in taints:
            parse_taint(taint)
        return taints


def parse_pool(text: str) -> Pool:
    """`NAME:COUNT[:RESOURCE=N[,RESOURCE=N...]]`, the command line's --pool."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[1].isdigit():
        raise ValueError(f"--pool {text!r}: expected NAME:COUNT[:RESOURCE=N,...]")
    resources: dict[str, int] = {}
    for item in filter(None, (parts[2] if len(parts) == 3 else "").split(",")):
        key, sep, value = item.partition("=")
        if not sep or not value.isdigit():
            raise ValueError(f"--pool {text!r}: resource {item!r} is not RESOURCE=N")
        resources[key] = int(value)
    return Pool(name=parts[0], count=int(parts[1]), resources=resources)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_status(ip: str, name: str, pool: Pool) -> dict[str, Any]:
    """A kubelet's Node status: capacity, Ready and pressure conditions, addresses, version."""
    capacity = {"cpu": str(pool.cpus), "memory": f"{pool.memory_gib}Gi", "pods": str(pool.max_pods)}
    capacity.update({k: str(v) for k, v in pool.resources.items()})
    now = _now()
    conditions = [
        ("Ready", "True", "KubeletReady", "day0 pod runner is posting ready status"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "not measured"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "not measured"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "not measured"),
    ]
    return {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": m, "lastHeartbeatTime": now, "lastTransitionTime": now}
            for t, s, r, m in conditions
        ],
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "nodeInfo": {
            "kubeletVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": "amd64",
            "containerRuntimeVersion": "day0-pod-runner://1",
            "kernelVersion": "",
            "osImage": "day0 pod runner (processes on the host)",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kubeProxyVersion": "",
        },
    }


def node_manifest(name: str, pool: Pool, ip: str, runner_id: str) -> dict[str, Any]:
    """The Node to register (status included, as a kubelet registers)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "day0-pod-runner",
                POOL_LABEL: pool.name,
                RUNNER_LABEL: runner_id,
                **pool.labels,
            },
        },
        "spec": {"taints": [parse_taint(t) for t in pool.taints]},
        "status": node_status(ip, name, pool),
    }


def lease_manifest(name: str, node_uid: str, duration_s: int) -> dict[str, Any]:
    """The node's heartbeat Lease in `kube-node-lease`, owned by the Node (deleted with it)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": "kube-node-lease",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": duration_s, "renewTime": now},
    }
