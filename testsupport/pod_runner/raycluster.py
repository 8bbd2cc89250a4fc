"""`process_backed(cluster)`: a cluster spec whose RayCluster can run real Ray on the runner's Nodes.

Why: the runner's pods share this machine's network namespace, each with its own 127.x address.
Ray then needs three things a pod network gives for free, all set through the spec's generic
options (`ray_start_params`, `pod_env`), never by the runner rewriting commands:
- every `ray start` advertises the pod's address (`node-ip-address: $(MY_POD_IP)`, MY_POD_IP from
  the downward API), or Ray picks the machine's own address;
- the ports Ray binds on 0.0.0.0 or 127.0.0.1 as well as the pod address (the dashboard agent's
  HTTP port, which KubeRay's probes use, and the metrics export port) differ per worker group:
  so each worker group may have at most one pod (one node), checked here;
- a small object store (Ray would size it from the machine's memory).
The GCS binds *:6379 whatever the address: one process-backed RayCluster at a time on a machine.

    spec = ClusterSpec.model_validate(process_backed({...cluster spec dict...}))
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from day0.core.ports import free_port

__all__ = ["process_backed"]

OBJECT_STORE_BYTES = 80_000_000


def _ports() -> dict[str, str]:
    return {"dashboard-agent-listen-port": str(free_port()), "metrics-export-port": str(free_port())}


def process_backed(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a ClusterSpec dict with the `ray_start_params` and `pod_env` the runner needs;
    ValueError naming the pool if a worker group could hold more than one pod."""
    out = copy.deepcopy(dict(cluster))
    for pool in out.get("node_pools") or []:
        most = pool.get("nodes") if pool.get("elastic") is None else pool["elastic"].get("max")
        if most is None or int(most) > 1:
            raise ValueError(
                f"node_pools[{pool.get('name')!r}]: at most 1 node per pool on the pod runner (got {most}): "
                "its pods share this machine's network, so each group's Ray ports are its own"
            )
        pool["ray_start_params"] = {**_ports(), **(pool.get("ray_start_params") or {})}
    out["ray_start_params"] = {
        "node-ip-address": "$(MY_POD_IP)",
        "object-store-memory": str(OBJECT_STORE_BYTES),
        **_ports(),
        **(out.get("ray_start_params") or {}),
    }
    env = [e for e in out.get("pod_env") or [] if e.get("name") != "MY_POD_IP"]
    out["pod_env"] = [{"name": "MY_POD_IP", "field_path": "status.podIP"}, *env]
    return out
