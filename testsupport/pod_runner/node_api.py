"""The runner's Nodes on the API server: heartbeats (status conditions and `kube-node-lease` Leases),
and waiting until a new Node is schedulable or a deleted one is gone.

Why: the API server puts `node.kubernetes.io/not-ready` on every new Node until the node
lifecycle controller has seen it Ready, so pods are not scheduled onto it before; and a Node's
name can be registered again only once the old object is gone.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from day0.backends.kuberay.watching import ResourceWatch
from testsupport.pod_runner.nodes import RUNNER_LABEL, Pool, lease_manifest, node_status

__all__ = ["NOT_READY", "RunnerNode", "heartbeat", "renew_lease", "wait_gone", "wait_schedulable"]

NOT_READY = "node.kubernetes.io/not-ready"
log = logging.getLogger(__name__)


@dataclass
class RunnerNode:
    """A Node the runner registered."""

    name: str
    pool: Pool
    ip: str
    uid: str


def renew_lease(coord: Any, node: RunnerNode, duration_s: int) -> None:
    """Renew the Node's Lease (create it if it is missing): the heartbeat the lifecycle controller reads."""
    body = lease_manifest(node.name, node.uid, duration_s=duration_s)
    try:
        coord.patch_namespaced_lease(node.name, "kube-node-lease", {"spec": body["spec"]})
    except ApiException as exc:
        if exc.status != 404:
            raise
        with contextlib.suppress(ApiException):
            coord.create_namespaced_lease("kube-node-lease", body)


def heartbeat(core: Any, coord: Any, node: RunnerNode, lease_s: int) -> None:
    """One kubelet heartbeat: fresh status conditions, then the Lease; a failure is logged (a deleted
    Node's 404 silently)."""
    try:
        conditions = node_status(node.ip, node.name, node.pool)["conditions"]
        core.patch_node_status(node.name, {"status": {"conditions": conditions}})
        renew_lease(coord, node, lease_s)
    except ApiException as exc:
        if exc.status != 404:
            log.warning("node %s: heartbeat failed: %s", node.name, exc.reason)


def wait_schedulable(core: Any, runner_id: str, names: Iterable[str], timeout_s: float) -> None:
    """Watch the runner's Nodes until `NOT_READY` is lifted from `names`; TimeoutError names the
    nodes still tainted."""
    wanted = set(names)
    watch = ResourceWatch(
        core.list_node,
        label_selector=f"{RUNNER_LABEL}={runner_id}",
        deadline=time.monotonic() + timeout_s,
    )

    def tainted() -> set[str]:
        return {
            n.metadata.name
            for n in watch.objects.values()
            if n.metadata.name in wanted and any(t.key == NOT_READY for t in n.spec.taints or [])
        }

    synced = False
    for kind, _ in watch:
        synced = synced or kind == "SYNCED"
        if synced and wanted <= {n.metadata.name for n in watch.objects.values()} and not tainted():
            watch.stop()
            return
    raise TimeoutError(f"nodes still tainted {NOT_READY} after {timeout_s:.0f} s: {sorted(tainted())}")


def wait_gone(core: Any, node: str, timeout_s: float = 30) -> None:
    """Poll until the Node is gone (404), for at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            core.read_node(node)
        except ApiException as exc:
            if exc.status == 404:
                return
        time.sleep(0.2)
