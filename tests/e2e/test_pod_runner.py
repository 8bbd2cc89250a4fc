"""The pod runner (testsupport.pod_runner) against the real API server, scheduler and KubeRay operator.

Its Nodes run their pods as real process trees: a plain pod (init container, env and fieldRefs,
ConfigMap/Secret/projected-token volumes, a readiness probe, graceful deletion), a crash loop, a
Node deleted under its pods, and RayClusters built by `build_raycluster` that run real Ray: a job
through the head's dashboard (with the cluster's Ray token; refused without it) sees every worker,
and the in-tree autoscaler grows an elastic pool.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from day0.backends.jobs import run_job
from day0.backends.kuberay.lifecycle import KubeRayCluster, raycluster_session
from day0.spec.cluster import ClusterSpec
from testsupport.pod_runner import PodRunner, Pool, process_backed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
NS = "day0"


def wait_for(
    what: str,
    check: Callable[[], Any],
    timeout_s: float = 60,
    every_s: float = 0.3,
    explain: Callable[[], str] = lambda: "",
) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(every_s)
    raise AssertionError(f"{what}: not after {timeout_s} s. {explain()}")


def explain_pod(core: Any, runner: PodRunner, name: str) -> Callable[[], str]:
    def explain() -> str:
        pod = core.read_namespaced_pod(name, NS)
        logs = sorted(runner.root.glob(f"{NS}.{name}.*/logs/*.log"))
        tails = {p.name: p.read_text()[-600:] for p in logs}
        return f"status: {pod.status.to_dict()}\nlogs: {tails}"

    return explain


def pod_ready(core: Any, name: str) -> bool:
    pod = core.read_namespaced_pod(name, NS)
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def gone(core: Any, name: str, kind: str = "pod") -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        getattr(core, f"read_namespaced_{kind}")(name, NS)
    except ApiException as exc:
        return exc.status == 404
    return False


def at_least(n: int, pids: list[int]) -> list[int] | None:
    return pids if len(pids) >= n else None


def alive(pids: list[int]) -> list[int]:
    return [p for p in pids if Path(f"/proc/{p}").exists() and "zombie" not in _state(p)]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].splitlines()[0].lower()
    except (OSError, IndexError):
        return "zombie"


@pytest.fixture
def core(api: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api)


@pytest.fixture
def objects(core: Any) -> Iterator[Callable[[str, dict[str, Any]], None]]:
    """Create ConfigMaps/Secrets/Pods in the test namespace; deleted (grace 0) after the test."""
    made: list[tuple[str, str]] = []

    def create(kind: str, body: dict[str, Any]) -> None:
        getattr(core, f"create_namespaced_{kind}")(NS, body)
        made.append((kind, body["metadata"]["name"]))

    yield create
    from kubernetes.client.exceptions import ApiException

    for kind, name in reversed(made):
        try:
            getattr(core, f"delete_namespaced_{kind}")(name, NS, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise


# --- a plain pod --------------------------------------------------------------------------------

MAIN = r"""
trap 'echo TERM > /out/term.txt; exit 0' TERM
echo "greeting=$GREETING name=$MY_NAME ns=$MY_NS ip=$MY_IP node=$MY_NODE cpu=$CPU_LIMIT mem_mi=$MEM_MI" > /out/env.txt
echo "$(cat /cfg/color) $(cat /sec/password)" > /out/volumes.txt
cp /var/run/secrets/kubernetes.io/serviceaccount/token /out/token
cat /var/run/secrets/kubernetes.io/serviceaccount/namespace > /out/namespace
cp /var/run/secrets/kubernetes.io/serviceaccount/ca.crt /out/ca.crt
cat /pod/labels > /out/labels
hostname > /out/hostname
for i in $(seq 100); do getent hosts "$SVC.$MY_NS.svc.cluster.local" && break; sleep 0.1; done > /out/dns.txt
getent hosts "$SVC" >> /out/dns.txt
python -m http.server 8099 --bind "$MY_IP" >/dev/null 2>&1 &
while true; do sleep 0.2; done
"""


def from_field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def plain_pod(name: str, pool: str, out: Path) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "plain", "tier": "t1"}},
        "spec": {
            "nodeSelector": {"day0.io/pool": pool},
            "terminationGracePeriodSeconds": 30,
            "initContainers": [
                {
                    "name": "init",
                    "image": "none",
                    "command": ["sh", "-c", "echo init ran as $(WHO) > /out/init.txt"],
                    "env": [from_field("POD", "metadata.name"), {"name": "WHO", "value": "init-of-$(POD)"}],
                    "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                }
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "none",
                    "command": ["sh", "-c", MAIN],
                    "env": [
                        from_field("MY_NAME", "metadata.name"),
                        from_field("MY_NS", "metadata.namespace"),
                        from_field("MY_IP", "status.podIP"),
                        from_field("MY_NODE", "spec.nodeName"),
                        {"name": "WHO", "value": "world"},
                        {"name": "SVC", "value": f"{name}-svc"},
                        {"name": "GREETING", "value": "hello-$(WHO)-$$(WHO)"},
                        {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                        {
                            "name": "MEM_MI",
                            "valueFrom": {"resourceFieldRef": {"resource": "requests.memory", "divisor": "1Mi"}},
                        },
                    ],
                    "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "2"}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": 8099}, "periodSeconds": 1},
                    "volumeMounts": [
                        {"name": "out", "mountPath": "/out"},
                        {"name": "cfg", "mountPath": "/cfg", "readOnly": True},
                        {"name": "sec", "mountPath": "/sec", "readOnly": True},
                        {"name": "pod", "mountPath": "/pod"},
                    ],
                }
            ],
            "volumes": [
                {"name": "out", "hostPath": {"path": str(out), "type": "DirectoryOrCreate"}},
                {"name": "cfg", "configMap": {"name": f"{name}-cfg"}},
                {"name": "sec", "secret": {"secretName": f"{name}-sec"}},
                {
                    "name": "pod",
                    "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
                },
            ],
        },
    }


def test_a_plain_pod_runs_goes_ready_and_is_stopped_with_sigterm(
    api: Any, core: Any, pod_runner: Any, objects: Any, tmp_path: Path
) -> None:
    from kubernetes import client

    runner: PodRunner = pod_runner(Pool(name="plain", count=1))
    (node,) = runner.node_names
    name = f"{pod_runner.prefix}-plain"
    objects("config_map", {"metadata": {"name": f"{name}-cfg"}, "data": {"color": "teal"}})
    objects("secret", {"metadata": {"name": f"{name}-sec"}, "stringData": {"password": "s3cret"}})
    objects(
        "service",
        {"metadata": {"name": f"{name}-svc"}, "spec": {"selector": {"app": "plain"}, "ports": [{"port": 8099}]}},
    )
    objects("pod", plain_pod(name, f"{pod_runner.prefix}-plain", tmp_path))

    wait_for("pod Ready", lambda: pod_ready(core, name), explain=explain_pod(core, runner, name))
    pod = core.read_namespaced_pod(name, NS)
    ip = pod.status.pod_ip
    assert pod.spec.node_name == node and pod.status.phase == "Running"
    assert ip.startswith("127.") and ip != pod.status.host_ip and pod.status.host_ip.startswith("127.")
    assert [p.ip for p in pod.status.pod_ips] == [ip] and pod.status.start_time is not None
    (main,) = pod.status.container_statuses
    assert main.ready and main.started and main.restart_count == 0 and main.state.running is not None
    (init,) = pod.status.init_container_statuses
    assert init.state.terminated.exit_code == 0 and init.state.terminated.reason == "Completed"

    assert (tmp_path / "init.txt").read_text() == f"init ran as init-of-{name}\n"
    assert (tmp_path / "env.txt").read_text() == (
        f"greeting=hello-world-$(WHO) name={name} ns={NS} ip={ip} node={node} cpu=2 mem_mi=64\n"
    )
    assert (tmp_path / "volumes.txt").read_text() == "teal s3cret\n"
    assert (tmp_path / "namespace").read_text() == NS and (tmp_path / "hostname").read_text() == f"{name}\n"
    assert 'app="plain"' in (tmp_path / "labels").read_text()
    dns = (tmp_path / "dns.txt").read_text().splitlines()  # hosts-file DNS: the Service is the pod's address
    assert [line.split()[0] for line in dns] == [ip, ip], dns
    root_ca = core.read_namespaced_config_map("kube-root-ca.crt", NS).data["ca.crt"]
    assert (tmp_path / "ca.crt").read_text() == root_ca
    review = client.AuthenticationV1Api(api).create_token_review({"spec": {"token": (tmp_path / "token").read_text()}})
    assert review.status.authenticated, review.status.error
    assert review.status.user.username == f"system:serviceaccount:{NS}:default"
    assert review.status.user.extra["authentication.kubernetes.io/pod-name"] == [name]

    pids = runner.pod_processes(NS, name)
    commands = [Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode() for p in pids]
    assert any("http.server 8099" in c for c in commands), commands
    main_pid = runner.container_pids(NS, name)["main"]
    assert main_pid in pids

    core.delete_namespaced_pod(name, NS)  # grace 30 s, capped by the runner at 5 s
    wait_for("pod object deleted by the runner", lambda: gone(core, name), timeout_s=30)
    assert (tmp_path / "term.txt").read_text() == "TERM\n"  # the container's PID 1 got SIGTERM
    assert alive(pids) == []


def test_a_crashing_container_is_restarted_with_back_off(core: Any, pod_runner: Any, objects: Any) -> None:
    pod_runner(Pool(name="crash", count=1))
    name = f"{pod_runner.prefix}-crash"
    objects(
        "pod",
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"day0.io/pool": f"{pod_runner.prefix}-crash"},
                "restartPolicy": "OnFailure",
                "containers": [{"name": "c", "image": "none", "command": ["sh", "-c", "sleep 0.2; exit 3"]}],
            },
        },
    )

    def restarted() -> Any:
        (status,) = core.read_namespaced_pod(name, NS).status.container_statuses or [None]
        return status if status is not None and status.restart_count >= 2 else None

    status = wait_for("two restarts", restarted, timeout_s=30)
    assert status.last_state.terminated.exit_code == 3 and status.last_state.terminated.reason == "Error"
    assert not status.ready
    assert core.read_namespaced_pod(name, NS).status.phase == "Running"


def test_exec_probes_gate_readiness_and_restart_an_unhealthy_container(
    core: Any, pod_runner: Any, objects: Any
) -> None:
    runner: PodRunner = pod_runner(Pool(name="probe", count=1))
    name = f"{pod_runner.prefix}-probe"
    script = "touch /tmp/alive; sleep 2; touch /tmp/ready; sleep 2; rm /tmp/alive; sleep 3600"
    exec_probe = lambda path, failures: {  # noqa: E731
        "exec": {"command": ["test", "-f", path]},
        "periodSeconds": 1,
        "failureThreshold": failures,
    }
    objects(
        "pod",
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"day0.io/pool": name},
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "c",
                        "image": "none",
                        "command": ["sh", "-c", script],
                        "readinessProbe": exec_probe("/tmp/ready", 1),
                        "livenessProbe": exec_probe("/tmp/alive", 2),
                    }
                ],
            },
        },
    )
    status = lambda: (core.read_namespaced_pod(name, NS).status.container_statuses or [None])[0]  # noqa: E731
    wait_for("running", lambda: (s := status()) is not None and s.state.running is not None)
    assert not pod_ready(core, name)
    wait_for("Ready once the exec readiness probe passes", lambda: pod_ready(core, name))
    restarted = wait_for(
        "restarted after the liveness probe failed",
        lambda: (s := status()).restart_count >= 1 and s,
        timeout_s=30,
        explain=explain_pod(core, runner, name),
    )
    assert restarted.last_state.terminated.exit_code == 137  # sh ignores SIGTERM as PID 1: SIGKILL after 1 s


def test_deleting_a_node_kills_its_pods_at_once(core: Any, pod_runner: Any, objects: Any) -> None:
    runner: PodRunner = pod_runner(Pool(name="doomed", count=2))
    victim, survivor = runner.node_names
    stubborn = "trap '' TERM; sleep 3600 & wait"  # ignores SIGTERM (sleep too): only SIGKILL ends it
    names = {}
    for node in (victim, survivor):
        names[node] = f"{node}-pod"
        objects(
            "pod",
            {
                "metadata": {"name": names[node]},
                "spec": {
                    "nodeName": node,
                    "terminationGracePeriodSeconds": 300,
                    "containers": [{"name": "c", "image": "none", "command": ["sh", "-c", stubborn]}],
                },
            },
        )
    for node in (victim, survivor):
        wait_for(f"pod on {node} Ready", lambda node=node: pod_ready(core, names[node]))
    doomed, spared = (
        wait_for("unshare, sh and sleep", lambda n=n: at_least(3, runner.pod_processes(NS, names[n])))
        for n in (victim, survivor)
    )

    start = time.monotonic()
    core.delete_node(victim)  # through the API server: the runner learns it from its Node watch
    wait_for("the deleted node's processes gone", lambda: not alive(doomed), timeout_s=10, every_s=0.05)
    took = time.monotonic() - start
    print(f"processes of the deleted node gone {took:.2f} s after the delete call")
    assert took < 5, "SIGKILL at once, not after a grace period"  # the pods' grace period is 300 s
    assert alive(spared) == spared and pod_ready(core, names[survivor])
    pool = f"{pod_runner.prefix}-doomed"
    added = runner.add_node(pool)  # a fresh node of the pool, schedulable once the controller agrees
    runner.wait_schedulable([added])
    assert added == f"{pool}-2" and sorted(runner.node_names) == [survivor, added]


# --- real Ray through KubeRay ---------------------------------------------------------------------

ACCEL = {"resource": "day0.io/accel", "per_node": 1, "memory_gib": 1}


def ray_cluster_spec(prefix: str, pools: list[dict[str, Any]], env: dict[str, str] | None = None) -> ClusterSpec:
    """A process-backed RayCluster spec: the head on the runner's `head` pool, one worker group
    per entry of `pools` (each one node, so its ports are its own) on the `work` pool."""
    spec = {
        "backend": "kuberay",
        "namespace": NS,
        "ready_timeout_s": 240,
        "dashboard_via": "pod-ip",
        "head": {"node_selector": {"day0.io/pool": f"{prefix}-head"}, "cpus": 2, "memory_gib": 4},
        "pod_env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "node_pools": [
            {
                "accelerator": ACCEL,
                "cpus_per_node": 2,
                "memory_gib_per_node": 2,
                "node_selector": {"day0.io/pool": f"{prefix}-work"},
                **pool,
            }
            for pool in pools
        ],
    }
    return ClusterSpec.model_validate(process_backed(spec))


def ray_pools(workers: int) -> tuple[Pool, Pool]:
    return (
        Pool(name="head", count=1, cpus=4, memory_gib=16),
        Pool(name="work", count=workers, cpus=2, memory_gib=4, resources={"day0.io/accel": 1}),
    )


JOB = """
import json, os
import boto3, ray
import day0
ray.init()
nodes = [n for n in ray.nodes() if n["Alive"]]
workers = [n for n in nodes if n["Resources"].get("accel")]
@ray.remote(num_cpus=1, resources={"accel": 1})
def where():
    import day0, socket
    return ray.util.get_node_ip_address()
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ran = ray.get([where.options(scheduling_strategy=On(n["NodeID"], soft=False)).remote() for n in workers])
s3 = boto3.client("s3", endpoint_url=os.environ["DAY0_STORE_ENDPOINT_URL"], region_name="us-east-1",
                  aws_access_key_id=os.environ["DAY0_STORE_ACCESS_KEY_ID"],
                  aws_secret_access_key=os.environ["DAY0_STORE_SECRET_ACCESS_KEY"])
s3.put_object(Bucket=os.environ["BUCKET"], Key="pod-runner/job.json", Body=json.dumps(sorted(ran)).encode())
ips = sorted(n["NodeManagerAddress"] for n in nodes)
print("RESULT " + json.dumps({"alive": len(nodes), "node_ips": ips, "ran_on": sorted(ran)}))
"""


def job_result(logs: str) -> dict[str, Any]:
    line = next(x for x in logs.splitlines() if x.startswith("RESULT "))
    return dict(json.loads(line.removeprefix("RESULT ")))


def submit_status(address: str, token: str | None) -> int:
    """The HTTP status of a bare job submission to the head's job API (no Ray SDK)."""
    body = json.dumps({"entrypoint": "echo should-not-run"}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{address}/api/jobs/", body, headers), timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_raycluster_runs_real_ray_on_runner_nodes(api: Any, core: Any, pod_runner: Any, s3_server: Any) -> None:
    runner: PodRunner = pod_runner(*ray_pools(workers=3))
    store = {k: os.environ[k] for k in os.environ if k.startswith("DAY0_STORE_")}
    cluster = ray_cluster_spec(
        pod_runner.prefix,
        [{"name": "a", "nodes": 1}, {"name": "b", "nodes": 1}],
        env={**store, "BUCKET": s3_server.bucket},
    )
    start = time.monotonic()
    with raycluster_session(cluster, f"{pod_runner.prefix} ray", api_client=api) as rc:
        ready_s = time.monotonic() - start
        print(f"RayCluster created -> Ready with real Ray in {ready_s:.1f} s")
        pods = {p.metadata.labels["ray.io/group"]: p for p in rc.pods()}
        assert set(pods) == {"headgroup", "a", "b"}, sorted(pods)
        assert all(p.spec.node_name in runner.node_names for p in pods.values())
        address = rc.dashboard_address(via="pod-ip")
        # Ray's token auth (KubeRay's authOptions): the job API refuses a submission without the token or with a
        # wrong one, and the dashboard listens on the head pod's address only (the pods share this machine's
        # network: a dashboard on 0.0.0.0 would answer on any 127.x address).
        assert submit_status(address, None) == 401 and submit_status(address, "not-the-token") == 403
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.254.254.254", 8265), timeout=5).close()
        outcome = run_job(address, f"python -c {shlex.quote(JOB)}", timeout_s=180, auth_token=rc.auth_token())
        assert outcome.ok, outcome.logs_tail
        result = job_result(outcome.logs_tail)
        pod_ips = sorted(p.status.pod_ip for p in pods.values())
        assert result["alive"] == 3 and result["node_ips"] == pod_ips, (result, pod_ips)
        assert result["ran_on"] == sorted(pods[g].status.pod_ip for g in ("a", "b"))
        stored = s3_server.client().get_object(Bucket=s3_server.bucket, Key="pod-runner/job.json")["Body"].read()
        assert json.loads(stored) == result["ran_on"]
        assert runner.processes()
    assert rc.get() is None and rc.pods() == []
    wait_for("no Ray process left", lambda: not runner.processes(), timeout_s=30)
    wait_for("the token Secret deleted with its RayCluster", lambda: gone(core, rc.name, "secret"), timeout_s=30)


COUNT_JOB = """
import json, ray
ray.init()
nodes = ray.nodes()
print("RESULT " + json.dumps({"alive": sorted(n["NodeManagerAddress"] for n in nodes if n["Alive"]),
                              "dead": sorted(n["NodeManagerAddress"] for n in nodes if not n["Alive"])}))
"""


def test_a_lost_worker_node_is_replaced_and_its_pod_rejoins_ray(api: Any, core: Any, pod_runner: Any) -> None:
    runner: PodRunner = pod_runner(*ray_pools(workers=3))  # one spare node for the replacement
    cluster = ray_cluster_spec(pod_runner.prefix, [{"name": "a", "nodes": 1}, {"name": "b", "nodes": 1}])
    with raycluster_session(cluster, f"{pod_runner.prefix} lose", api_client=api) as rc:
        victim = next(p for p in rc.pods() if p.metadata.labels["ray.io/group"] == "a")
        lost_ip, lost_node = victim.status.pod_ip, victim.spec.node_name
        rc.start_monitor()
        start = time.monotonic()
        runner.delete_node(lost_node)
        assert not alive(runner.pod_processes(NS, victim.metadata.name))
        rc.wait_recovered(180)
        rc.stop_monitor()
        print(f"worker node lost -> replacement Ready in {time.monotonic() - start:.1f} s")
        kinds = {e.kind for e in rc.events}
        assert {"node-lost", "pod-replaced", "recovered"} <= kinds, rc.events
        pods = [p for p in rc.pods() if p.metadata.deletion_timestamp is None]  # the lost pod may still be going
        (new,) = [p for p in pods if p.metadata.labels["ray.io/group"] == "a"]
        assert new.spec.node_name in runner.node_names and new.spec.node_name != lost_node
        address, token = rc.dashboard_address(via="pod-ip"), rc.auth_token()
        want = sorted(p.status.pod_ip for p in pods)

        def rejoined() -> dict[str, Any] | None:  # Ray marks the lost raylet dead after its heartbeat timeout
            outcome = run_job(address, f"python -c {shlex.quote(COUNT_JOB)}", timeout_s=120, auth_token=token)
            assert outcome.ok, outcome.logs_tail
            result = job_result(outcome.logs_tail)
            return result if result["alive"] == want and lost_ip in result["dead"] else None

        wait_for("Ray sees the replacement alive and the lost node dead", rejoined, timeout_s=120, every_s=3)


AUTOSCALE_JOB = """
import json, ray
from ray.util.placement_group import placement_group
ray.init()
pg = placement_group([{"accel": 1, "CPU": 1}] * 2, strategy="STRICT_SPREAD")
ray.get(pg.ready(), timeout=240)
nodes = [n for n in ray.nodes() if n["Alive"]]
print("RESULT " + json.dumps({"alive": len(nodes), "accel": sum(n["Resources"].get("accel", 0) for n in nodes)}))
"""


def test_the_autoscaler_grows_the_elastic_pool_for_a_bigger_job(api: Any, pod_runner: Any) -> None:
    from kubernetes import client

    runner: PodRunner = pod_runner(*ray_pools(workers=2))
    cluster = ray_cluster_spec(
        pod_runner.prefix, [{"name": "fixed", "nodes": 1}, {"name": "elastic", "elastic": {"min": 0, "max": 1}}]
    )
    with raycluster_session(cluster, f"{pod_runner.prefix} grow", api_client=api) as rc:
        groups = sorted(p.metadata.labels["ray.io/group"] for p in rc.pods())
        assert groups == ["fixed", "headgroup"], groups
        start = time.monotonic()
        outcome = run_job(
            rc.dashboard_address(via="pod-ip"),
            f"python -c {shlex.quote(AUTOSCALE_JOB)}",
            timeout_s=300,
            auth_token=rc.auth_token(),
        )
        print(f"placement group of 2 accelerators ready after {time.monotonic() - start:.1f} s (autoscaled)")
        assert outcome.ok, outcome.logs_tail
        assert job_result(outcome.logs_tail) == {"alive": 3, "accel": 2}
        obj = client.CustomObjectsApi(api).get_namespaced_custom_object("ray.io", "v1", NS, "rayclusters", rc.name)
        replicas = {g["groupName"]: g["replicas"] for g in obj["spec"]["workerGroupSpecs"]}
        assert replicas == {"fixed": 1, "elastic": 1}, replicas  # written by the autoscaler, with its own token
        elastic = [p for p in rc.pods() if p.metadata.labels["ray.io/group"] == "elastic"]
        assert len(elastic) == 1 and elastic[0].spec.node_name in runner.node_names
    assert KubeRayCluster.attach(rc.name, NS, api_client=api).pods() == []
    wait_for("no Ray process left", lambda: not runner.processes(), timeout_s=30)


# --- nothing outlives the runner ------------------------------------------------------------------


def test_a_killed_runner_leaves_no_process_and_the_next_one_sweeps_its_pods(
    core: Any, pod_runner: Any, objects: Any, tmp_path: Path
) -> None:
    import contextlib
    import signal
    import subprocess
    import sys

    from kubernetes.client.exceptions import ApiException

    from testsupport.pod_runner import marked_processes

    pool = f"{pod_runner.prefix}-orphan"
    node = f"{pool}-0"
    standalone = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testsupport.pod_runner",
            "--kubeconfig",
            os.environ["KUBECONFIG"],
            "--pool",
            f"{pool}:1",
        ],
        cwd=Path(__file__).resolve().parents[2],  # the checkout: testsupport is not installed, `-m` finds it here
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert standalone.stdout is not None
        first = standalone.stdout.readline()
        assert f"nodes {node}" in first, first
        objects(
            "pod",
            {
                "metadata": {"name": f"{node}-pod"},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "image": "none", "command": ["sh", "-c", "sleep 3600 & wait"]}],
                },
            },
        )
        wait_for("pod Ready", lambda: pod_ready(core, f"{node}-pod"))
        pids = wait_for(  # unshare (exec'd by setpriv), the container's sh, its sleep
            "the pod's three processes",
            lambda: at_least(3, marked_processes(lambda m: m.split("/")[1] == node)),
        )
        standalone.send_signal(signal.SIGKILL)
        standalone.wait(10)
        wait_for("the dead runner's processes gone", lambda: not alive(pids), timeout_s=10, every_s=0.05)
        stale_uid = core.read_node(node).metadata.uid  # nobody deleted the Node: its kubelet just died
        runner: PodRunner = pod_runner(Pool(name="orphan", count=1))
        assert runner.node_names == [node] and core.read_node(node).metadata.uid != stale_uid
        assert gone(core, f"{node}-pod")  # the stale pod was swept; its processes were already gone
    finally:
        if standalone.poll() is None:
            standalone.kill()
            standalone.wait()
        with contextlib.suppress(ApiException):  # on a failure before the sweep, the dead runner's Node
            core.delete_node(node)
