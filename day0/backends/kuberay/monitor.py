"""The failure monitor of one RayCluster: watch streams of its pods, the nodes and Warning events.

Contracts:
- Watches, never polls: three `ResourceWatch` streams (the cluster's pods by KubeRay's
  `ray.io/cluster` label, the nodes, the namespace's Warning events), each resumed by
  resourceVersion and relisted on 410 Gone, each in its own daemon thread. State changes only
  under one lock, so events are handled one at a time whichever stream they come from.
- `start()` returns once pods and nodes are listed (the baseline). Pods already lost then are
  reported too; pods Pending at the baseline that get a node later are neither replacements nor
  scale-ups (the cluster is still coming up).
- It appends to the `events` list it is given (never rewrites it), each with its time:
  `node-lost` (a pod's node was deleted or is NotReady), `pod-lost` (a pod Failed, or someone else
  deleted it), `pod-replaced` (a pod created after the baseline got a node, and its group had lost
  a pod not yet replaced), `scale-up` (the same with no such loss: the autoscaler grew the group),
  `recovered` (after a loss, every lost pod of the group has a Ready replacement again), `warning`
  (a Warning Event about the RayCluster or one of its pods, once per Event; a watch that failed
  and resumes). Whether a new pod replaces a loss is decided when it is first seen, per group
  (`ray.io/group`); a replacement lost before it is Ready reopens the loss.
- With `recover`, pods of lost nodes and failed pods are force-deleted (grace 0: a dead kubelet never
  confirms), so KubeRay recreates them at once and the scheduler places them on a healthy node.
- The streams are not ordered with each other: a pod on a node no stream has shown yet is checked
  with one GET of that node before it is called lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from kubernetes.client.exceptions import ApiException

from day0.backends.kuberay.status import (
    CLUSTER_LABEL,
    GROUP_LABEL,
    ClusterError,
    ClusterEvent,
    EventKind,
    Node,
    Pod,
    node_ready,
    pod_ready,
)
from day0.backends.kuberay.watching import ApiObject, EventType, ResourceWatch

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api, CoreV1Event

__all__ = ["ClusterMonitor"]

Handler = Callable[[EventType, ApiObject], None]


class ClusterMonitor:
    """`ClusterMonitor(core, "day0", "day0-run-1-ab12cd", events).start()`; `.stop()` when the job is done."""

    def __init__(
        self, core: CoreV1Api, namespace: str, cluster: str, events: list[ClusterEvent], *, recover: bool = True
    ) -> None:
        self._core, self._namespace, self._cluster = core, namespace, cluster
        self.events = events
        self._recover = recover
        self._lock = threading.Lock()
        self._pods: dict[str, Pod] = {}  # uid -> pod
        self._nodes: dict[str, Node] = {}  # name -> node
        self._deleted_nodes: set[str] = set()
        self._handled: set[str] = set()  # pod uids already reported lost
        self._baseline: set[str] | None = None  # pod uids when pods and nodes were first listed
        self._new: dict[str, EventKind] = {}  # uid -> scale-up | pod-replaced, for pods created after it
        self._unreplaced: dict[str, int] = {}  # group -> lost pods no new pod has taken the place of
        self._replacing: dict[str, str] = {}  # uid -> group: replacements not Ready yet
        self._losses: dict[str, tuple[float, int]] = {}  # group -> (first loss, losses) until recovered
        self._synced: set[str] = set()
        self._baselined = threading.Event()
        self._watches: list[ResourceWatch] = []
        self._threads: list[threading.Thread] = []

    # -- running --
    def start(self, timeout_s: float = 60.0) -> None:
        streams = {
            "pods": (
                ResourceWatch(
                    self._core.list_namespaced_pod,
                    self._namespace,
                    on_error=self._resuming("pods"),
                    label_selector=f"{CLUSTER_LABEL}={self._cluster}",
                ),
                self._on_pod,
            ),
            "nodes": (ResourceWatch(self._core.list_node, on_error=self._resuming("nodes")), self._on_node),
            "events": (
                ResourceWatch(
                    self._core.list_namespaced_event,
                    self._namespace,
                    on_error=self._resuming("events"),
                    field_selector="type=Warning",
                ),
                self._on_event,
            ),
        }
        for stream, (watcher, handler) in streams.items():
            thread = threading.Thread(
                target=self._follow,
                args=(stream, watcher, handler),
                name=f"watch-{stream}-{self._cluster}",
                daemon=True,
            )
            self._watches.append(watcher)
            self._threads.append(thread)
            thread.start()
        if not self._baselined.wait(timeout_s):
            self.stop()
            raise ClusterError(
                f"monitor of RayCluster {self._cluster}: pods and nodes not listed in "
                f"{timeout_s:.0f} s: {[e.message for e in self.events if e.kind == 'warning'][-3:]}"
            )

    def stop(self) -> None:
        for watcher in self._watches:
            watcher.stop()
        for thread in self._threads:
            thread.join(timeout=10)
        self._watches, self._threads = [], []

    def _follow(self, stream: str, watcher: ResourceWatch, handler: Handler) -> None:
        try:
            for kind, obj in watcher:
                with self._lock:
                    try:
                        if kind == "SYNCED":
                            self._on_synced(stream)
                        else:
                            handler(kind, obj)
                    except Exception as exc:  # noqa: BLE001 - an API hiccup (a failed force-delete) must not kill the monitor
                        self._add("warning", message=f"{stream}: handling {kind} failed: {exc}")
        except Exception as exc:  # noqa: BLE001 - not an API or connection error (those resume): say that the stream ended
            with self._lock:
                self._add("warning", message=f"watch of {stream} stopped: {exc!r}")

    def _resuming(self, stream: str) -> Callable[[Exception], None]:
        def report(exc: Exception) -> None:
            with self._lock:
                self._add("warning", message=f"watch of {stream} failed, resuming: {exc}")

        return report

    # -- reconciling --
    def _on_synced(self, stream: str) -> None:
        self._synced.add(stream)
        if self._baseline is None and {"pods", "nodes"} <= self._synced:
            self._baseline = set(self._pods)
            for pod in list(self._pods.values()):
                self._check(pod)
            self._baselined.set()

    def _on_pod(self, kind: EventType, pod: Pod) -> None:
        uid = pod.metadata.uid
        if kind == "DELETED":
            self._pods.pop(uid, None)
            if self._baseline is not None and uid not in self._handled:
                self._lose(pod, "pod-lost", "pod deleted", delete=False)
            self._new.pop(uid, None)
            return
        before = self._pods.get(uid)
        self._pods[uid] = pod
        if self._baseline is None:
            return
        if uid not in self._baseline and uid not in self._new and uid not in self._handled:
            self._new[uid] = self._classify(pod)
        if uid in self._handled or self._check(pod):
            return
        newly_placed = pod.spec.node_name and not (before is not None and before.spec.node_name)
        if newly_placed and uid in self._new:
            new = self._new[uid]
            why = "replaces a lost pod" if new == "pod-replaced" else "the group grows"
            self._add(new, pod, f"pod {pod.metadata.name} scheduled on {pod.spec.node_name}: {why}")
        if uid in self._replacing and pod.spec.node_name and pod_ready(pod):
            self._recovering(self._replacing.pop(uid))

    def _classify(self, pod: Pod) -> EventKind:
        """A pod created after the baseline takes the place of a lost one of its group, if any is open."""
        group = _group(pod)
        if self._unreplaced.get(group, 0) > 0:
            self._unreplaced[group] -= 1
            self._replacing[pod.metadata.uid] = group
            return "pod-replaced"
        return "scale-up"

    def _recovering(self, group: str) -> None:
        """`recovered` once every loss of `group` has a Ready replacement."""
        if group not in self._losses or self._unreplaced.get(group, 0) > 0 or group in self._replacing.values():
            return
        since, lost = self._losses.pop(group)
        took, pods = time.time() - since, "pod" if lost == 1 else "pods"
        message = f"pool {group!r}: Ready again {took:.1f} s after its first loss ({lost} {pods} lost)"
        self.events.append(ClusterEvent(kind="recovered", pool=group, message=message))

    def _on_node(self, kind: EventType, node: Node) -> None:
        name = node.metadata.name
        if kind == "DELETED":
            self._nodes.pop(name, None)
            self._deleted_nodes.add(name)
        else:
            self._nodes[name] = node
            self._deleted_nodes.discard(name)
            if node_ready(node):
                return
        if self._baseline is not None:
            for pod in [p for p in self._pods.values() if p.spec.node_name == name]:
                if pod.metadata.uid not in self._handled:
                    self._check(pod)

    def _on_event(self, kind: EventType, event: CoreV1Event) -> None:
        """Warning Events created after the first list, about this RayCluster or its pods."""
        about = event.involved_object
        ours = (about.kind == "RayCluster" and about.name == self._cluster) or (
            about.kind == "Pod" and (about.name or "").startswith(f"{self._cluster}-")
        )
        if kind != "ADDED" or "events" not in self._synced or not ours:
            return
        when: datetime | None = event.last_timestamp or event.event_time or event.first_timestamp
        self.events.append(
            _event(
                "warning",
                f"{event.reason}: {event.message}",
                self._pods.get(about.uid or ""),
                name=about.name if about.kind == "Pod" else None,
                at=when.timestamp() if when else None,
            )
        )

    def _check(self, pod: Pod) -> bool:
        """Report (and recover) a pod whose node is lost or that Failed; True if it was."""
        where, name = pod.spec.node_name, pod.metadata.name
        why = self._node_lost(where) if where else None
        if why:
            self._lose(pod, "node-lost", f"node {where} {why}; pod {name} lost")
        elif pod.status.phase == "Failed":
            self._lose(pod, "pod-lost", f"pod failed: {pod.status.reason or pod.status.message or ''}")
        else:
            return False
        return True

    def _node_lost(self, name: str) -> str | None:
        if name in self._deleted_nodes:
            return "deleted"
        node = self._nodes.get(name)
        if node is None:  # not on the node stream yet: ask once
            try:
                node = self._nodes[name] = self._core.read_node(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                self._deleted_nodes.add(name)
                return "deleted"
        return None if node_ready(node) else "NotReady"

    def _lose(self, pod: Pod, kind: EventKind, message: str, *, delete: bool = True) -> None:
        uid, group = pod.metadata.uid, _group(pod)
        self._handled.add(uid)
        self._add(kind, pod, message)
        self._replacing.pop(uid, None)  # a replacement lost before it was Ready: its loss is open again
        self._unreplaced[group] = self._unreplaced.get(group, 0) + 1
        since, lost = self._losses.get(group, (time.time(), 0))
        self._losses[group] = (since, lost + 1)
        if delete and self._recover:
            try:
                self._core.delete_namespaced_pod(pod.metadata.name, self._namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def _add(self, kind: EventKind, pod: Pod | None = None, message: str = "") -> None:
        self.events.append(_event(kind, message, pod))


def _group(pod: Pod) -> str:
    return str((pod.metadata.labels or {}).get(GROUP_LABEL) or "")


def _event(
    kind: EventKind, message: str, pod: Pod | None, *, name: str | None = None, at: float | None = None
) -> ClusterEvent:
    """An event about `pod` (or a pod called `name` that is not, or no longer, in the cache)."""
    return ClusterEvent(
        kind=kind,
        message=message,
        at=time.time() if at is None else at,
        pod=pod.metadata.name if pod is not None else name,
        node=pod.spec.node_name if pod is not None else None,
        pool=(_group(pod) or None) if pod is not None else None,
    )
