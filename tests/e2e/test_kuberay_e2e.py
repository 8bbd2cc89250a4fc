"""The KubeRay backend against a real API server, scheduler and KubeRay operator (kwok nodes).

kwok pods run no processes, so these tests cover the Kubernetes side (manifest accepted by the
CRDs, pods created and placed, readiness, failure and recovery, teardown); job submission to a
real head is covered by tests/integration/test_ray_jobs.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from day0.backends.kuberay.lifecycle import KubeRayCluster, delete_run_clusters, raycluster_session
from day0.backends.kuberay.manifest import build_raycluster, cluster_name
from day0.backends.kuberay.status import ClusterError
from day0.spec.cluster import ClusterSpec
from testsupport.ray import local_head

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
HEAD_ON_CPU = {"day0.io/role": "cpu"}


def spec(fixed: str, elastic: str, *, nodes: int, elastic_max: int, timeout_s: float = 90) -> ClusterSpec:
    gpu = {"resource": "nvidia.com/gpu", "per_node": 8, "memory_gib": 80}
    return ClusterSpec.model_validate(
        {
            "backend": "kuberay",
            "namespace": "day0",
            "ready_timeout_s": timeout_s,
            "node_pools": [
                {"name": "fixed", "accelerator": gpu, "nodes": nodes, "node_selector": {"day0.io/pool": fixed}},
                {
                    "name": "elastic",
                    "accelerator": gpu,
                    "elastic": {"min": 0, "max": elastic_max},
                    "node_selector": {"day0.io/pool": elastic},
                    "tolerations": [{"key": "day0.io/elastic", "operator": "Exists", "effect": "NoSchedule"}],
                },
            ],
        }
    )


def placement(rc: KubeRayCluster, api: Any) -> dict[str, list[str]]:
    """Pool label of the node each pod runs on, by group (`head` for the head)."""
    from kubernetes import client

    pools = {n.metadata.name: n.metadata.labels.get("day0.io/pool") for n in client.CoreV1Api(api).list_node().items}
    out: dict[str, list[str]] = {}
    for pod in rc.pods():
        group = "head" if pod.metadata.labels.get("ray.io/node-type") == "head" else pod.metadata.labels["ray.io/group"]
        out.setdefault(group, []).append(pools.get(pod.spec.node_name, "<unscheduled>"))
    return out


def assert_gone(rc: KubeRayCluster) -> None:
    assert rc.get() is None, f"RayCluster {rc.name} still exists"
    assert rc.pods() == [], f"pods of {rc.name} still exist"


@pytest.fixture
def pools(node_pools: Callable[..., str]) -> tuple[str, str]:
    """A 3-node fixed pool, a 2-node elastic pool, and a decoy GPU pool nothing may land on."""
    fixed = node_pools("fixed", 3)
    elastic = node_pools("elastic", 2, taints=["nvidia.com/gpu=present:NoSchedule", "day0.io/elastic=true:NoSchedule"])
    node_pools("decoy", 2)
    return fixed, elastic


def test_two_pools_become_ready_on_matching_nodes(api: Any, pools: tuple[str, str]) -> None:
    fixed, elastic = pools
    with raycluster_session(
        spec(fixed, elastic, nodes=3, elastic_max=2),
        "e2e ready",
        api_client=api,
        workers={"fixed": 3, "elastic": 1},
        head_node_selector=HEAD_ON_CPU,
    ) as rc:
        where = placement(rc, api)
        assert where == {"head": ["cpu"], "fixed": [fixed] * 3, "elastic": [elastic]}
        assert [e.kind for e in rc.events] == ["created", "ready"]
        obj = rc.get()
        assert obj is not None and obj["spec"]["enableInTreeAutoscaling"] is True
        conds = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
        assert conds.get("HeadPodReady") == "True" and conds.get("RayClusterProvisioned") == "True"
    assert_gone(rc)


def test_overflow_lands_on_the_elastic_pool(api: Any, pools: tuple[str, str]) -> None:
    fixed, elastic = pools
    plan = {"tensor_parallel": 8, "data_parallel": 5}  # 40 GPUs: 3 fixed nodes + 2 elastic
    with raycluster_session(
        spec(fixed, elastic, nodes=3, elastic_max=2),
        "e2e overflow",
        api_client=api,
        plan=plan,
        head_node_selector=HEAD_ON_CPU,
    ) as rc:
        where = placement(rc, api)
        assert sorted(where["fixed"]) == [fixed] * 3 and sorted(where["elastic"]) == [elastic] * 2
    assert_gone(rc)


def test_full_elastic_pool_stays_pending_with_a_clear_report(api: Any, pools: tuple[str, str]) -> None:
    fixed, elastic = pools
    cluster = spec(fixed, elastic, nodes=3, elastic_max=4, timeout_s=20)  # the spec allows 4, 2 exist
    with (
        pytest.raises(ClusterError) as err,
        raycluster_session(
            cluster, "e2e full", api_client=api, workers={"fixed": 3, "elastic": 4}, head_node_selector=HEAD_ON_CPU
        ),
    ):
        pass
    message = str(err.value)
    print(message)
    assert "not Ready after 20 s" in message and "pool 'elastic': 2/4 Ready" in message, message
    assert "2 Pending" in message and "short of nvidia.com/gpu" in message, message
    assert "pool 'fixed'" not in message and "pool 'head'" not in message, message
    assert_gone(KubeRayCluster.attach(cluster_name("e2e full"), "day0", api_client=api))


@pytest.mark.parametrize("failure", ["delete", "notready"])
def test_node_failure_is_detected_and_recovered(api: Any, pools: tuple[str, str], failure: str) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api)
    fixed, elastic = pools
    with raycluster_session(
        spec(fixed, elastic, nodes=3, elastic_max=2),
        f"e2e fail {failure}",
        api_client=api,
        workers={"fixed": 2, "elastic": 0},
        head_node_selector=HEAD_ON_CPU,
    ) as rc:
        rc.start_monitor()
        victim = next(p for p in rc.pods() if p.metadata.labels.get("ray.io/group") == "fixed")
        dead = victim.spec.node_name
        if failure == "delete":
            core.delete_node(dead)
        else:  # kwok stops heartbeating an unannotated node; report it NotReady as a dead kubelet would
            core.patch_node(dead, {"metadata": {"annotations": {"kwok.x-k8s.io/node": None}}})
            core.patch_node_status(
                dead,
                {
                    "status": {
                        "conditions": [
                            {
                                "type": "Ready",
                                "status": "False",
                                "reason": "KubeletDown",
                                "message": "test: kubelet stopped",
                                "lastHeartbeatTime": None,
                                "lastTransitionTime": None,
                            }
                        ]
                    }
                },
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not {"node-lost", "pod-replaced"} <= {e.kind for e in rc.events}:
            time.sleep(0.5)
        rc.wait_recovered(90)
        rc.stop_monitor()
        kinds = [e.kind for e in rc.events if e.kind != "warning"]  # Warning Events come as they come
        lost = next(e for e in rc.events if e.kind == "node-lost")
        assert lost.node == dead and lost.pod == victim.metadata.name and lost.pool == "fixed", rc.events
        replaced = [e for e in rc.events if e.kind == "pod-replaced"]
        assert replaced and all(e.node != dead for e in replaced), rc.events
        assert kinds[-1] == "recovered"
        workers = [p for p in rc.pods() if p.metadata.labels.get("ray.io/group") == "fixed"]
        assert len(workers) == 2 and dead not in {p.spec.node_name for p in workers}
    assert_gone(rc)


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt], ids=["error", "cancel"])
def test_teardown_after_a_failure_on_purpose(api: Any, pools: tuple[str, str], exc: type[BaseException]) -> None:
    fixed, elastic = pools
    with (
        pytest.raises(exc, match="on purpose"),
        raycluster_session(
            spec(fixed, elastic, nodes=3, elastic_max=2),
            f"e2e boom {exc.__name__}",
            api_client=api,
            workers={"fixed": 1, "elastic": 1},
            head_node_selector=HEAD_ON_CPU,
        ) as rc,
    ):
        assert len(rc.pods()) == 3
        raise exc("failing on purpose")
    assert_gone(rc)


def test_keep_cluster_is_honoured(api: Any, pools: tuple[str, str]) -> None:
    fixed, elastic = pools
    cluster = spec(fixed, elastic, nodes=3, elastic_max=2).model_copy(update={"keep_cluster": True})
    with raycluster_session(
        cluster, "e2e keep", api_client=api, workers={"fixed": 1, "elastic": 0}, head_node_selector=HEAD_ON_CPU
    ) as rc:
        pass
    try:
        assert rc.get() is not None and len(rc.pods()) == 2
    finally:
        rc.delete()
    assert_gone(rc)


def test_a_handle_deletes_only_the_cluster_it_created(api: Any) -> None:
    """A fenced attempt's teardown leaves the cluster of the same name a later attempt made (issue 44)."""
    cluster = spec("x", "y", nodes=1, elastic_max=1)
    manifest = build_raycluster(cluster, "e2e replaced", workers={"fixed": 0, "elastic": 0})
    earlier, later = KubeRayCluster(manifest, api_client=api), KubeRayCluster(manifest, api_client=api)
    earlier.create()
    KubeRayCluster.attach(earlier.name, earlier.namespace, api_client=api).delete()  # the later attempt's sweep
    later.create()
    try:
        assert earlier.uid and later.uid and earlier.uid != later.uid
        earlier.delete()
        kept = later.get()
        assert kept is not None and kept["metadata"]["uid"] == later.uid
        assert earlier.events[-1].message == "already replaced by a later attempt's"
    finally:
        later.delete()
    assert later.get() is None


def test_the_sweep_deletes_a_runs_leftover_cluster_and_no_other_runs(api: Any) -> None:
    """What a rerun's provisioning does first (`KubeRayBackend._provision`): the dead attempt's RayCluster,
    found by its run-id label, is deleted; another run's is left alone."""
    cluster = spec("x", "y", nodes=1, elastic_max=1)
    dead, other = (
        KubeRayCluster(build_raycluster(cluster, run, workers={"fixed": 0, "elastic": 0}), api_client=api)
        for run in ("e2e rerun", "e2e other run")
    )
    dead.create()
    other.create()
    try:
        assert delete_run_clusters("day0", "e2e rerun", api_client=api) == [dead.name]
        assert dead.get() is None and other.get() is not None
    finally:
        other.delete()
    assert other.get() is None


def test_bad_manifest_is_rejected_by_the_crd(api: Any) -> None:
    cluster = spec("x", "y", nodes=1, elastic_max=1)
    manifest = build_raycluster(cluster, "e2e invalid", workers={"fixed": 1, "elastic": 0})
    manifest["spec"]["workerGroupSpecs"][0]["replicas"] = "many"
    with pytest.raises(ClusterError, match="rejected the manifest"):
        KubeRayCluster(manifest, api_client=api).create()


def test_unschedulable_head_and_workers_are_reported(api: Any) -> None:
    cluster = spec("no-such-pool", "no-such-pool-2", nodes=1, elastic_max=1, timeout_s=5)
    with (
        pytest.raises(ClusterError) as err,
        raycluster_session(
            cluster,
            "e2e nowhere",
            api_client=api,
            workers={"fixed": 1, "elastic": 0},
            head_node_selector={"day0.io/role": "no-such-node"},
        ),
    ):
        pass
    message = str(err.value)
    print(message)
    assert_gone(KubeRayCluster.attach(cluster_name("e2e nowhere"), "day0", api_client=api))
    assert "not Ready after 5 s" in message and "pool 'head': 0/1 Ready" in message, message
    assert "pool 'fixed': 0/1 Ready" in message and "no matching node" in message, message


def test_node_lost_during_a_job_is_in_the_result(api: Any, pools: tuple[str, str]) -> None:
    """The job runs on a real local Ray head (kwok pods run no processes) while the backend watches
    the RayCluster; a worker's node dies mid-job and the result carries the events."""
    import threading

    from kubernetes import client

    fixed, elastic = pools
    with (
        local_head() as head,
        raycluster_session(
            spec(fixed, elastic, nodes=3, elastic_max=2),
            "e2e job",
            api_client=api,
            workers={"fixed": 2, "elastic": 0},
            head_node_selector=HEAD_ON_CPU,
        ) as rc,
    ):
        victim = next(p for p in rc.pods() if p.metadata.labels.get("ray.io/group") == "fixed")
        killer = threading.Timer(3.0, client.CoreV1Api(api).delete_node, args=(victim.spec.node_name,))
        killer.start()
        result = rc.run_job("python -c \"import time; time.sleep(15); print('job done')\"", timeout_s=120, address=head)
        killer.join()
        rc.wait_recovered(60)
    assert result.job.ok and "job done" in result.job.logs_tail
    lost = [e for e in result.events if e.kind == "node-lost"]
    assert lost and lost[0].node == victim.spec.node_name and lost[0].pod == victim.metadata.name, result.events
    assert any(e.kind == "pod-replaced" and e.node != victim.spec.node_name for e in result.events), result.events
    assert_gone(rc)
