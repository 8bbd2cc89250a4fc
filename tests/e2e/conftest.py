"""The Kubernetes test control plane for e2e tests: kwok cluster + KubeRay operator (k8s/).

Before the first e2e test, `k8s/e2e-up.sh` runs (on binaries built beside the first tests, see
tests/fixtures/builds.py; it reuses a healthy cluster),
and tears the cluster down at the end only if it started it (or keep it: DAY0_E2E_KEEP=1).
A build or start failure FAILS the tests: they never skip silently. At the end no day0
RayCluster may remain in any namespace.
"""

from __future__ import annotations

import fcntl
import importlib.util
import itertools
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import builds

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
NAMESPACE = "day0"
_spec = importlib.util.spec_from_file_location("fake_nodes", K8S / "fake_nodes.py")
assert _spec is not None and _spec.loader is not None
fake_nodes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_nodes)


def _kubeconfig() -> str:
    return subprocess.run(
        [str(K8S / "e2e-up.sh"), "--kubeconfig"], check=True, text=True, capture_output=True
    ).stdout.strip()


def _healthy(kubeconfig: str) -> bool:
    from kubernetes import client, config

    if not Path(kubeconfig).exists():
        return False
    try:
        api = config.new_client_from_config(kubeconfig)
        client.VersionApi(api).get_code(_request_timeout=5)
        return True
    except Exception:  # noqa: BLE001 - any failure to reach the API server means "not up"
        return False


_bring_up: dict[str, Any] = {}


def _cache() -> Path:
    return Path(os.environ.get("DAY0_CACHE") or Path.home() / ".cache" / "day0")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Before the first e2e test, wait for the control plane's build (tests/fixtures/builds.py started
    it when collection finished, so the other tests ran beside it) and bring the cluster up. Outside
    the per-test timeout: this hook wraps pytest-timeout's, and a cold build can take tens of minutes."""
    if item.get_closest_marker("e2e") and not _bring_up:
        _bring_up_control_plane()
    yield


def _bring_up_control_plane() -> None:
    """Under pytest-xdist the e2e tests share one worker, but another session may be bringing the
    cluster up too: the bring-up is serialised by a lock, and the session (xdist's run id) that found
    no healthy cluster is recorded as its owner, so it tears it down at the end, and only then."""
    try:
        builds.wait_for(builds.CONTROL_PLANE)
    except builds.BuildFailed as failed:
        _bring_up.update(rc="build", log=str(failed))
        return
    cache, run_id = _cache(), os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"
    cache.mkdir(parents=True, exist_ok=True)
    owner = cache / "e2e-up.owner"
    with (cache / "e2e-up.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        kubeconfig = _kubeconfig()
        if not _healthy(kubeconfig):
            owner.write_text(run_id)
        elif not owner.exists() or owner.read_text() != run_id:
            owner.unlink(missing_ok=True)  # up before this session: someone else's, kept
        _bring_up["was_up"] = not owner.exists()
        run = subprocess.run([str(K8S / "e2e-up.sh")], text=True, capture_output=True, timeout=7200)
    _bring_up.update(kubeconfig=kubeconfig, rc=run.returncode, log=run.stderr[-4000:])


@pytest.fixture(scope="session")
def api() -> Iterator[Any]:
    """An ApiClient on the test cluster brought up by k8s/e2e-up.sh; FAILS if it could not be."""
    from kubernetes import config

    if _bring_up.get("rc") != 0:
        pytest.fail(f"the control plane is not up (rc {_bring_up.get('rc')}):\n{_bring_up.get('log')}", pytrace=False)
    kubeconfig = _bring_up["kubeconfig"]
    os.environ["KUBECONFIG"] = kubeconfig
    api = config.new_client_from_config(kubeconfig)
    yield api
    left = _day0_rayclusters(api)
    if not _bring_up["was_up"] and not os.environ.get("DAY0_E2E_KEEP"):
        subprocess.run([str(K8S / "e2e-down.sh")], check=False, timeout=300)
        (_cache() / "e2e-up.owner").unlink(missing_ok=True)
    assert not left, f"leaked RayClusters: {[_describe(i) for i in left.values()]}"


def _day0_rayclusters(api: Any) -> dict[str, dict[str, Any]]:
    from kubernetes import client

    listed = client.CustomObjectsApi(api).list_cluster_custom_object(
        "ray.io", "v1", "rayclusters", label_selector="app.kubernetes.io/managed-by=day0"
    )["items"]
    return {i["metadata"]["uid"]: i for i in listed}


def _describe(rc: dict[str, Any]) -> str:
    meta = rc["metadata"]
    return (
        f"{meta['namespace']}/{meta['name']} (run {meta.get('labels', {}).get('day0.io/run-id')}, created "
        f"{meta.get('creationTimestamp')}, deleting since {meta.get('deletionTimestamp')}, "
        f"finalizers {meta.get('finalizers')}, state {rc.get('status', {}).get('state')})"
    )


@pytest.fixture(autouse=True)
def _no_raycluster_left_by_this_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test that reaches the cluster leaves no day0 RayCluster it made: a leak is named by its test."""
    if "api" not in request.fixturenames:
        yield
        return
    api = request.getfixturevalue("api")
    before = _day0_rayclusters(api)
    yield
    made = {uid: rc for uid, rc in _day0_rayclusters(api).items() if uid not in before}
    assert not made, f"{request.node.nodeid} left RayClusters: {[_describe(i) for i in made.values()]}"


_counter = itertools.count()


@pytest.fixture
def node_pools(api: Any, request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """Factory: `make(kind, count, gpus=8, taints=[...])` creates fake nodes of a pool unique to
    this test and returns its label value; the nodes are deleted after the test."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    made: list[str] = []
    stem = f"t{os.getpid() % 1000}-{next(_counter)}"

    def make(kind: str, count: int, *, gpus: int = 8, taints: list[str] | None = None) -> str:
        pool = f"{stem}-{kind}"
        for manifest in fake_nodes.pool_nodes(
            pool,
            count,
            resource="nvidia.com/gpu",
            per_node=gpus,
            taints=taints or ["nvidia.com/gpu=present:NoSchedule"],
        ):
            core.create_node(manifest)
            made.append(manifest["metadata"]["name"])
        _wait_nodes_ready(core, made)
        return pool

    yield make
    for name in made:
        try:
            core.delete_node(name)
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise


def _wait_nodes_ready(core: Any, names: list[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready = {
            n.metadata.name
            for n in core.list_node().items
            if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        }
        if set(names) <= ready:
            return
        time.sleep(0.5)
    raise AssertionError(f"kwok did not make nodes Ready in {timeout_s} s: {sorted(set(names) - ready)}")


@pytest.fixture
def pod_runner(api: Any) -> Iterator[Callable[..., Any]]:
    """Factory: `start(*pools, **options)` starts a `PodRunner` (testsupport.pod_runner) whose Nodes run
    their pods as real processes; pool names get a prefix unique to this test (the factory's `.prefix`).
    After the test the runner is stopped, and no process of it may be left."""
    from testsupport.pod_runner import PodRunner, Pool, marked_processes

    runners: list[PodRunner] = []
    prefix = f"pr{os.getpid() % 1000}-{next(_counter)}"

    def start(*pools: Pool, **options: Any) -> PodRunner:
        named = [p.model_copy(update={"name": f"{prefix}-{p.name}"}) for p in pools]
        options = {"max_grace_s": 5.0, "backoff_s": 1.0, "max_backoff_s": 5.0, **options}
        runner = PodRunner(api, named, **options).start()
        runners.append(runner)
        return runner

    start.prefix = prefix  # type: ignore[attr-defined]
    yield start
    for runner in runners:
        runner.stop()
    left = {r.runner_id: marked_processes(lambda m, r=r: m.startswith(f"{r.runner_id}/")) for r in runners}
    assert not any(left.values()), f"pod runner processes left behind: {left}"
