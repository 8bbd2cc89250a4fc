"""The KubeRay backend's watch side without an API server: status readers, `ResourceWatch`
(resume by resourceVersion, relist on 410 Gone) and `ClusterMonitor` fed by scripted streams.

The real API server, scheduler and operator are in tests/e2e/test_kuberay_e2e.py."""

from __future__ import annotations

import functools
import json
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from day0.backends.kuberay import watching
from day0.backends.kuberay.monitor import ClusterMonitor
from day0.backends.kuberay.status import (
    ClusterError,
    ClusterEvent,
    node_ready,
    pool_reports,
    raycluster_ready,
    unschedulable,
)
from day0.backends.kuberay.watching import ResourceWatch

END = object()  # a watch window the server closed


def cond(kind: str, status: bool, message: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(type=kind, status="True" if status else "False", message=message, reason=None)


def pod(
    name: str,
    node: str | None = None,
    *,
    phase: str = "Running",
    group: str = "fixed",
    rv: str = "1",
    conditions: list[SimpleNamespace] | None = None,
) -> SimpleNamespace:
    return SimpleNamespace(
        metadata=SimpleNamespace(
            name=name,
            uid=f"uid-{name}",
            resource_version=rv,
            labels={"ray.io/group": group, "ray.io/node-type": "worker"},
        ),
        spec=SimpleNamespace(node_name=node),
        status=SimpleNamespace(
            phase=phase,
            reason=None,
            message=None,
            conditions=conditions if conditions is not None else [cond("Ready", True)],
        ),
    )


def node(name: str, *, ready: bool = True, rv: str = "1") -> SimpleNamespace:
    return SimpleNamespace(
        metadata=SimpleNamespace(name=name, uid=f"uid-{name}", resource_version=rv),
        status=SimpleNamespace(conditions=[cond("Ready", ready)]),
    )


class Listing:
    """A `list_*` API function: each call returns the next page (the last one repeats); its watch
    streams read `.events`, and `.watched` records the resourceVersion each watch started from."""

    def __init__(self, *pages: tuple[list[Any], str]) -> None:
        self.pages, self.calls = list(pages), 0
        self.watched: list[str | None] = []
        self.events: queue.Queue[Any] = queue.Queue()

    def __call__(self, *args: Any, **kwargs: Any) -> SimpleNamespace:
        items, version = self.pages[min(self.calls, len(self.pages) - 1)]
        self.calls += 1
        return SimpleNamespace(items=list(items), metadata=SimpleNamespace(resource_version=version))

    def push(self, *items: Any) -> None:
        for item in items:
            self.events.put(item)


class FakeWatch:
    """`kubernetes.watch.Watch` over a `Listing`'s queue: events, END, or an exception to raise."""

    def __init__(self) -> None:
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    def stream(
        self, func: Listing, *args: Any, resource_version: str, timeout_seconds: int, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        func.watched.append(resource_version)
        closes = time.monotonic() + timeout_seconds  # the server ends every window
        while not self._stopped and time.monotonic() < closes:
            try:
                item = func.events.get(timeout=0.02)
            except queue.Empty:
                continue
            if item is END:
                return
            if isinstance(item, Exception):
                raise item
            kind, obj = item
            yield {
                "type": kind,
                "object": obj,
                "raw_object": {"metadata": {"resourceVersion": obj.metadata.resource_version}},
            }


@pytest.fixture(autouse=True)
def fake_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watching.watch, "Watch", FakeWatch)


def names(events: Sequence[tuple[str, Any]]) -> list[tuple[str, str | None]]:
    return [(kind, obj.metadata.name if obj is not None else None) for kind, obj in events]


def take(watch: ResourceWatch, n: int) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for event in watch:
        out.append(event)
        if len(out) == n:
            break
    return out


# --- status readers ----------------------------------------------------------------------------


def test_raycluster_ready_reads_conditions_and_fails_fast() -> None:
    ready = {"status": {"conditions": [{"type": "HeadPodReady", "status": "True"}], "readyWorkerReplicas": 3}}
    assert raycluster_ready(ready, 3) and not raycluster_ready(ready, 4)
    assert not raycluster_ready(None, 0)
    assert raycluster_ready(
        {"status": {"state": "ready", "readyWorkerReplicas": 1}}, 1
    )  # an operator without conditions
    failed = {
        "metadata": {"name": "rc"},
        "status": {
            "conditions": [
                {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreateWorkerPod", "message": "quota"}
            ]
        },
    }
    with pytest.raises(ClusterError, match="rc: FailedCreateWorkerPod: quota"):
        raycluster_ready(failed, 0)


def test_pending_pods_say_what_is_short() -> None:
    why = "0/9 nodes are available: 9 Insufficient nvidia.com/gpu. preemption: 0/9 nodes are available."
    pending = pod("w1", phase="Pending", conditions=[cond("PodScheduled", False, why)])
    assert unschedulable(pending) == "short of nvidia.com/gpu (0/9 nodes are available: 9 Insufficient nvidia.com/gpu)"
    assert unschedulable(pod("w2", "n1")) is None
    head = pod("h", "n0")
    head.metadata.labels = {"ray.io/node-type": "head", "ray.io/group": "headgroup"}
    manifest = {"spec": {"workerGroupSpecs": [{"groupName": "fixed", "replicas": 2}]}}
    [report] = pool_reports([head, pod("w2", "n1"), pending], manifest)
    assert str(report) == f"pool 'fixed': 1/2 Ready, 2 pods, 1 Pending: {unschedulable(pending)}"
    assert "KubeRay created no pods" in str(pool_reports([], {"metadata": {"namespace": "day0"}})[0])


# --- ResourceWatch -----------------------------------------------------------------------------


def test_watch_resumes_from_its_version_and_relists_on_gone() -> None:
    a, b = pod("a", rv="5"), pod("b", rv="6")
    listing = Listing(([a, b], "10"), ([pod("c", rv="20")], "20"))
    listing.push(
        ("MODIFIED", pod("a", rv="11")),
        ("BOOKMARK", pod("bookmark", rv="12")),
        END,
        ("DELETED", pod("b", rv="13")),
        END,
        ApiException(status=410, reason="Expired: too old resource version"),
    )
    watch = ResourceWatch(listing, "day0", label_selector="ray.io/cluster=x")
    got = names(take(watch, 8))
    assert got == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("SYNCED", None),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
        ("DELETED", "a"),
        ("ADDED", "c"),
        ("SYNCED", None),
    ]  # a vanished while we were gone
    assert listing.watched == ["10", "12", "13"] and listing.calls == 2
    assert [o.metadata.name for o in watch.objects.values()] == ["c"] and watch.resource_version == "20"


def test_watch_errors_resume_or_raise() -> None:
    listing = Listing(([pod("a")], "1"))
    listing.push(ApiException(status=500, reason="etcd hiccup"), ("ADDED", pod("b", rv="2")))
    errors: list[Exception] = []
    watch = ResourceWatch(listing, "day0", on_error=errors.append)
    assert names(take(watch, 3)) == [("ADDED", "a"), ("SYNCED", None), ("ADDED", "b")]
    assert len(errors) == 1 and listing.calls == 1 and listing.watched == ["1", "1"]  # resumed, not relisted
    listing.push(ApiException(status=403, reason="Forbidden"))
    with pytest.raises(ApiException, match="Forbidden"):
        list(ResourceWatch(listing, "day0"))


def test_watch_ends_at_its_deadline() -> None:
    start = time.monotonic()
    listing = Listing(([pod("a")], "1"))
    got = list(ResourceWatch(listing, "day0", deadline=start + 1.5))
    assert names(got) == [("ADDED", "a"), ("SYNCED", None)] and 1.5 <= time.monotonic() - start < 5
    assert listing.watched == ["1", "1"]  # a 1 s window, then the rest of the deadline


# --- ClusterMonitor ----------------------------------------------------------------------------


class FakeCore:
    def __init__(self, pods: list[Any], nodes: list[Any], *, pod_pages: Sequence[list[Any]] = ()) -> None:
        self.list_namespaced_pod = Listing((pods, "1"), *((p, "50") for p in pod_pages))
        self.list_node = Listing((nodes, "1"))
        self.list_namespaced_event = Listing(([warning("old", "OldNews")], "1"))
        self.known_nodes: dict[str, Any] = {}
        self.deleted: list[tuple[str, int | None]] = []

    def read_node(self, name: str) -> Any:
        if name not in self.known_nodes:
            raise ApiException(status=404, reason="Not Found")
        return self.known_nodes[name]

    def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int | None = None) -> None:
        self.deleted.append((name, grace_period_seconds))


def warning(pod_name: str, reason: str) -> SimpleNamespace:
    return SimpleNamespace(
        metadata=SimpleNamespace(name=f"{pod_name}.1", uid=f"ev-{pod_name}-{reason}", resource_version="2"),
        involved_object=SimpleNamespace(kind="Pod", name=pod_name, uid=f"uid-{pod_name}"),
        reason=reason,
        message="0/3 nodes are available",
        last_timestamp=None,
        event_time=None,
        first_timestamp=None,
    )


def until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def kinds(events: list[ClusterEvent]) -> list[tuple[str, str | None]]:
    return [(e.kind, e.pod) for e in events]


def test_monitor_reports_and_recovers_from_watch_events() -> None:
    rc = "day0-run-abc123"
    w1, w2, pending = pod(f"{rc}-w1", "n1"), pod(f"{rc}-w2", "n2"), pod(f"{rc}-w3", phase="Pending")
    core = FakeCore([w1, w2, pending], [node("n1"), node("n2"), node("n3")])
    events: list[ClusterEvent] = []
    monitor = ClusterMonitor(core, "day0", rc, events)
    monitor.start()
    try:
        assert events == []  # the baseline is quiet; old Warning Events are not news
        core.list_node.push(("DELETED", node("n1", rv="2")))
        until(lambda: len(events) == 1)
        assert (events[0].kind, events[0].pod, events[0].node, events[0].pool) == (
            "node-lost",
            w1.metadata.name,
            "n1",
            "fixed",
        )
        assert events[0].message == f"node n1 deleted; pod {w1.metadata.name} lost"
        assert core.deleted == [(w1.metadata.name, 0)]  # force-deleted: its kubelet will never confirm
        pods = core.list_namespaced_pod
        pods.push(
            ("DELETED", w1),
            ("ADDED", pod(f"{rc}-w4", rv="3")),
            ("MODIFIED", pod(f"{rc}-w4", "n3", rv="4")),
            ("MODIFIED", pod(f"{rc}-w3", "n3", rv="5")),
        )  # pending at the baseline: not a replacement
        until(lambda: len(events) == 3)
        assert (events[1].kind, events[1].node) == ("pod-replaced", "n3")
        assert (events[2].kind, events[2].pool) == ("recovered", "fixed")  # w4 took w1's place and is Ready
        core.list_node.push(("MODIFIED", node("n2", ready=False, rv="6")))
        until(lambda: len(events) == 4)
        assert events[3].message == f"node n2 NotReady; pod {w2.metadata.name} lost"
        pods.push(("MODIFIED", pod(f"{rc}-w4", "n3", phase="Failed", rv="7")), ("DELETED", pod(f"{rc}-w3", "n3")))
        core.list_namespaced_event.push(
            ("ADDED", warning(f"{rc}-w5", "FailedScheduling")), ("ADDED", warning("someone-else", "FailedScheduling"))
        )
        until(lambda: len(events) == 7)
        assert sorted(kinds(events[4:])) == [
            ("pod-lost", f"{rc}-w3"),
            ("pod-lost", f"{rc}-w4"),
            ("warning", f"{rc}-w5"),
        ]  # two streams: in any order
        assert {e.message for e in events[4:]} == {
            "pod failed: ",
            "pod deleted",
            "FailedScheduling: 0/3 nodes are available",
        }
        pods.push(("ADDED", pod(f"{rc}-w6", "n7", rv="8")))  # a node no stream has shown: asked once, 404
        until(lambda: len(events) == 8)
        assert events[7].kind == "node-lost" and events[7].message.startswith("node n7 deleted")
    finally:
        threads, start = list(monitor._threads), time.monotonic()
        monitor.stop()
    assert len(threads) == 3 and not any(t.is_alive() for t in threads)
    assert time.monotonic() - start < 2  # stopped at once, not at the end of a 60 s watch window


def test_monitor_baseline_and_gone_pods() -> None:
    rc = "day0-run-abc123"
    orphan, keep, vanished = pod(f"{rc}-w1", "gone-node"), pod(f"{rc}-w2", "n1"), pod(f"{rc}-w3", "n1")
    core = FakeCore([orphan, keep, vanished], [node("n1")], pod_pages=[[keep]])
    events: list[ClusterEvent] = []
    monitor = ClusterMonitor(core, "day0", rc, events, recover=False)
    monitor.start()
    try:
        assert kinds(events) == [("node-lost", orphan.metadata.name)]  # lost before we looked
        core.list_namespaced_pod.push(ApiException(status=410, reason="Gone"))
        until(lambda: len(events) == 2)  # the relist shows both gone meanwhile; one was already reported
        time.sleep(0.2)
        assert kinds(events[1:]) == [("pod-lost", vanished.metadata.name)] and events[1].message == "pod deleted"
        assert core.list_namespaced_pod.calls == 2 and core.list_namespaced_pod.watched == ["1", "50"]
    finally:
        monitor.stop()
    assert core.deleted == []  # recover=False only reports


# --- scale-up, replacement, recovery: objects as the API server sends them ----------------------

_API = ApiClient()


def api_pod(
    name: str,
    rv: int,
    *,
    group: str,
    node: str | None = None,
    phase: str = "Pending",
    ready: bool = False,
    rc: str = "day0-run-abc123",
) -> Any:
    """A `V1Pod` deserialized from the JSON a watch event carries (as `kubernetes.watch` does)."""
    status: dict[str, Any] = {"phase": phase, "qosClass": "Guaranteed"}
    if node is not None:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-06-01T10:00:00Z"},
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": "2025-06-01T10:00:05Z"},
        ]
        status["hostIP"] = "10.0.0.9"
    else:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}
        ]
    raw = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": f"{rc}-{group}-worker-{name}",
            "namespace": "day0",
            "uid": f"0f7c1e2a-{name}",
            "resourceVersion": str(rv),
            "creationTimestamp": "2025-06-01T10:00:00Z",
            "labels": {"ray.io/cluster": rc, "ray.io/group": group, "ray.io/node-type": "worker"},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": rc, "uid": "rc-uid"}],
        },
        "spec": {
            "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.49.0-py311"}],
            **({"nodeName": node} if node else {}),
        },
        "status": status,
    }
    return _API.deserialize(json.dumps(raw), "V1Pod", "application/json")


def api_node(name: str, rv: int, *, ready: bool = True, pool: str = "gpu-elastic") -> Any:
    raw = {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"node-{name}",
            "resourceVersion": str(rv),
            "labels": {"day0.io/pool": pool, "kubernetes.io/hostname": name},
        },
        "spec": {"taints": [] if ready else [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"},
            ],
            "capacity": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"},
        },
    }
    return _API.deserialize(json.dumps(raw), "V1Node", "application/json")


def test_an_uninterrupted_autoscaling_run_reports_scale_ups_and_no_loss() -> None:
    """The Ray autoscaler grows the elastic pool twice; the cluster autoscaler brings a node up for
    each (NotReady, then Ready). Only `scale-up` events, with the pool, pod, node and time."""
    fixed = [api_pod(f"f{i}", 10 + i, group="gpu-fixed", node=f"f{i}", phase="Running", ready=True) for i in range(2)]
    core = FakeCore(fixed, [api_node(f"f{i}", 5, pool="gpu-fixed") for i in range(2)])
    events: list[ClusterEvent] = []
    monitor = ClusterMonitor(core, "day0", "day0-run-abc123", events)
    monitor.start()
    started = time.time()
    try:
        pods, nodes = core.list_namespaced_pod, core.list_node
        for i, rv in ((1, 100), (2, 200)):
            name, where = f"e{i}", f"elastic-{i}"
            pods.push(("ADDED", api_pod(name, rv, group="gpu-elastic")))  # Pending: no node yet
            nodes.push(("ADDED", api_node(where, rv + 1, ready=False)), ("MODIFIED", api_node(where, rv + 2)))
            until(functools.partial(lambda n: n in monitor._nodes and node_ready(monitor._nodes[n]), where))
            pods.push(
                ("MODIFIED", api_pod(name, rv + 3, group="gpu-elastic", node=where)),
                ("MODIFIED", api_pod(name, rv + 4, group="gpu-elastic", node=where, phase="Running")),
                ("MODIFIED", api_pod(name, rv + 5, group="gpu-elastic", node=where, phase="Running", ready=True)),
            )
            until(functools.partial(lambda n: len(events) == n, i))
        # a pod scheduled before the node stream shows its node: one GET finds it Ready
        core.known_nodes["elastic-3"] = api_node("elastic-3", 300)
        pods.push(("ADDED", api_pod("e3", 301, group="gpu-elastic", node="elastic-3", phase="Running")))
        until(lambda: len(events) == 3)
        time.sleep(0.2)
    finally:
        monitor.stop()
    assert [(e.kind, e.pool, e.node) for e in events] == [
        ("scale-up", "gpu-elastic", "elastic-1"),
        ("scale-up", "gpu-elastic", "elastic-2"),
        ("scale-up", "gpu-elastic", "elastic-3"),
    ]
    assert events[0].pod == "day0-run-abc123-gpu-elastic-worker-e1"
    assert events[0].message.endswith("scheduled on elastic-1: the group grows")
    assert started <= events[0].at <= events[1].at <= events[2].at <= time.time()
    assert core.deleted == []


def test_a_lost_node_is_replaced_then_recovered_while_another_pool_grows() -> None:
    """Node f0 (two fixed workers) is deleted: two `node-lost`, both force-deleted. Meanwhile the
    elastic pool grows: a `scale-up`, not a replacement (another group). KubeRay recreates two fixed
    pods: two `pod-replaced`; `recovered` (pool gpu-fixed) only once both are Ready."""
    w = [api_pod(f"w{i}", 10 + i, group="gpu-fixed", node="f0", phase="Running", ready=True) for i in range(2)]
    w.append(api_pod("w2", 12, group="gpu-fixed", node="f1", phase="Running", ready=True))
    core = FakeCore(w, [api_node("f0", 5, pool="gpu-fixed"), api_node("f1", 5, pool="gpu-fixed")])
    core.known_nodes = {"elastic-1": api_node("elastic-1", 40), "f2": api_node("f2", 41, pool="gpu-fixed")}
    events: list[ClusterEvent] = []
    monitor = ClusterMonitor(core, "day0", "day0-run-abc123", events)
    monitor.start()
    try:
        pods = core.list_namespaced_pod
        core.list_node.push(("DELETED", api_node("f0", 50, pool="gpu-fixed")))
        until(lambda: len(events) == 2)
        pods.push(
            ("DELETED", w[0]),  # our force-deletes: already reported
            ("DELETED", w[1]),
            ("ADDED", api_pod("e1", 60, group="gpu-elastic")),
            ("MODIFIED", api_pod("e1", 61, group="gpu-elastic", node="elastic-1", phase="Running", ready=True)),
            ("ADDED", api_pod("r0", 62, group="gpu-fixed")),
            ("ADDED", api_pod("r1", 63, group="gpu-fixed")),
            ("MODIFIED", api_pod("r0", 64, group="gpu-fixed", node="f2", phase="Running", ready=True)),
            ("MODIFIED", api_pod("r1", 65, group="gpu-fixed", node="f2", phase="Running")),
        )
        until(lambda: len(events) == 5)
        time.sleep(0.2)
        assert "recovered" not in [e.kind for e in events]  # r1 is not Ready yet
        pods.push(("MODIFIED", api_pod("r1", 66, group="gpu-fixed", node="f2", phase="Running", ready=True)))
        until(lambda: len(events) == 6)
        time.sleep(0.2)
    finally:
        monitor.stop()
    assert [(e.kind, e.pool) for e in events] == [
        ("node-lost", "gpu-fixed"),
        ("node-lost", "gpu-fixed"),
        ("scale-up", "gpu-elastic"),
        ("pod-replaced", "gpu-fixed"),
        ("pod-replaced", "gpu-fixed"),
        ("recovered", "gpu-fixed"),
    ]
    assert sorted(name for name, _ in core.deleted) == sorted(p.metadata.name for p in w[:2])
    assert events[5].message.startswith("pool 'gpu-fixed': Ready again ") and events[5].message.endswith(
        "(2 pods lost)"
    )
    assert events[0].at <= events[3].at <= events[5].at


def test_a_replacement_lost_before_it_is_ready_reopens_the_loss() -> None:
    core = FakeCore([api_pod("w0", 10, group="gpu-fixed", node="f0", phase="Running", ready=True)], [api_node("f0", 5)])
    core.known_nodes = {"f1": api_node("f1", 30), "f2": api_node("f2", 31)}
    events: list[ClusterEvent] = []
    monitor = ClusterMonitor(core, "day0", "day0-run-abc123", events)
    monitor.start()
    try:
        pods = core.list_namespaced_pod
        pods.push(("MODIFIED", api_pod("w0", 11, group="gpu-fixed", node="f0", phase="Failed")))
        pods.push(("ADDED", api_pod("r0", 20, group="gpu-fixed", node="f1", phase="Running")))
        pods.push(("MODIFIED", api_pod("r0", 21, group="gpu-fixed", node="f1", phase="Failed")))
        pods.push(("ADDED", api_pod("r1", 22, group="gpu-fixed", node="f2", phase="Running", ready=True)))
        until(lambda: len(events) == 5)
        pods.push(("ADDED", api_pod("e0", 23, group="gpu-fixed", node="f2", phase="Running", ready=True)))
        until(lambda: len(events) == 6)
    finally:
        monitor.stop()
    assert kinds(events) == [
        ("pod-lost", "day0-run-abc123-gpu-fixed-worker-w0"),
        ("pod-replaced", "day0-run-abc123-gpu-fixed-worker-r0"),
        ("pod-lost", "day0-run-abc123-gpu-fixed-worker-r0"),
        ("pod-replaced", "day0-run-abc123-gpu-fixed-worker-r1"),
        ("recovered", None),
        ("scale-up", "day0-run-abc123-gpu-fixed-worker-e0"),  # the loss is closed: the group grows
    ]
    assert events[4].message.endswith("after its first loss (2 pods lost)")  # w0, then its first replacement
