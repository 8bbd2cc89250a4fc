"""Fake kwok nodes for the test control plane: labelled, tainted node pools with accelerator capacity.

kwok manages every Node annotated `kwok.x-k8s.io/node: fake`: it keeps it Ready and drives pods
bound to it to Running through its stages, so thousands of "GPU nodes" cost a few KiB each.
Stdlib only, so scripts, tests and the benchmark share it:

    python3 k8s/fake_nodes.py --pool gpu-fixed --count 4 --gpus 8 --taint nvidia.com/gpu=present:NoSchedule \
        | kubectl apply -f -
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["POOL_LABEL", "node", "pool_nodes"]

POOL_LABEL = "day0.io/pool"


def _taint(text: str) -> dict[str, str]:
    """`key[=value]:Effect` -> a taint."""
    key_value, effect = text.rsplit(":", 1)
    key, _, value = key_value.partition("=")
    return {"key": key, "effect": effect, **({"value": value} if value else {})}


def node(
    name: str,
    *,
    pool: str,
    cpus: int = 96,
    memory_gib: int = 1536,
    resource: str | None = None,
    per_node: int = 0,
    labels: dict[str, str] | None = None,
    taints: list[str] | None = None,
) -> dict[str, Any]:
    """One fake Node manifest. `resource`/`per_node` set the accelerator capacity."""
    capacity = {"cpu": str(cpus), "memory": f"{memory_gib}Gi", "pods": "110"}
    if resource and per_node:
        capacity[resource] = str(per_node)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                POOL_LABEL: pool,
                **(labels or {}),
            },
        },
        "spec": {"taints": [_taint(t) for t in taints or []]},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},  # kwok fills the rest
    }


def pool_nodes(pool: str, count: int, **kwargs: Any) -> list[dict[str, Any]]:
    """`count` nodes named `<pool>-<i>`."""
    return [node(f"{pool}-{i}", pool=pool, **kwargs) for i in range(count)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--resource", default="nvidia.com/gpu")
    ap.add_argument("--gpus", type=int, default=0, help="accelerators per node (0: a CPU node)")
    ap.add_argument("--cpus", type=int, default=96)
    ap.add_argument("--memory-gib", type=int, default=1536)
    ap.add_argument("--label", action="append", default=[], help="key=value, repeatable")
    ap.add_argument("--taint", action="append", default=[], help="key[=value]:Effect, repeatable")
    a = ap.parse_args(argv)
    items = pool_nodes(
        a.pool,
        a.count,
        cpus=a.cpus,
        memory_gib=a.memory_gib,
        resource=a.resource,
        per_node=a.gpus,
        labels=dict(kv.split("=", 1) for kv in a.label),
        taints=a.taint,
    )
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)


if __name__ == "__main__":
    main()
