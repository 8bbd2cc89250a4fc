"""The KubeRay backend's watch side without an API server: status readers, `ResourceWatch`
(resume by resourceVersion, relist on 410 Gone) and `ClusterMonitor` fed by scripted streams.

The real API server, scheduler and operator are in tests/e2e/test_kuberay_e2e.py."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from day0.backends.kuberay import watching
from day0.backends.kuberay.monitor import ClusterMonitor
from day0.backends.kuberay.status import ClusterError, ClusterEvent, pool_reports, raycluster_ready, unschedulable
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
        self.pages, self.calls, self.watched = list(pages), 0, []
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


def names(events: list[tuple[str, Any]]) -> list[tuple[str, str | None]]:
    return [(kind, obj.metadata.name if obj is not None else None) for kind, obj in events]


def take(watch: ResourceWatch, n: int) -> list[tuple[str, Any]]:
    out = []
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
    def __init__(self, pods: list[Any], nodes: list[Any], *, pod_pages: list[list[Any]] = ()) -> None:
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
        until(lambda: len(events) == 2)
        assert (events[1].kind, events[1].node) == ("pod-replaced", "n3")
        core.list_node.push(("MODIFIED", node("n2", ready=False, rv="6")))
        until(lambda: len(events) == 3)
        assert events[2].message == f"node n2 NotReady; pod {w2.metadata.name} lost"
        pods.push(("MODIFIED", pod(f"{rc}-w4", "n3", phase="Failed", rv="7")), ("DELETED", pod(f"{rc}-w3", "n3")))
        core.list_namespaced_event.push(
            ("ADDED", warning(f"{rc}-w5", "FailedScheduling")), ("ADDED", warning("someone-else", "FailedScheduling"))
        )
        until(lambda: len(events) == 6)
        assert sorted(kinds(events[3:])) == [
            ("pod-lost", f"{rc}-w3"),
            ("pod-lost", f"{rc}-w4"),
            ("warning", f"{rc}-w5"),
        ]  # two streams: in any order
        assert {e.message for e in events[3:]} == {
            "pod failed: ",
            "pod deleted",
            "FailedScheduling: 0/3 nodes are available",
        }
        pods.push(("ADDED", pod(f"{rc}-w6", "n7", rv="8")))  # a node no stream has shown: asked once, 404
        until(lambda: len(events) == 7)
        assert events[6].kind == "node-lost" and events[6].message.startswith("node n7 deleted")
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
