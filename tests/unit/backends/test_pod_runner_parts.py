"""The pod runner's pure parts (testsupport.pod_runner): the kubelet's env and `$(VAR)` rules, pools
and taints, probe thresholds, the container setup script, Service DNS, pod phase and conditions;
and the spec options that let a
RayCluster run on it (`ray_start_params`, `pod_env`). The runner itself: tests/e2e/test_pod_runner.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from pydantic import ValidationError

from day0.backends.kuberay.manifest import build_raycluster
from day0.spec.cluster import ClusterSpec
from testsupport.pod_runner.__main__ import main
from testsupport.pod_runner.container import ContainerRun
from testsupport.pod_runner.expand import EnvError, base_env, container_env, expand
from testsupport.pod_runner.nodes import parse_pool, parse_taint
from testsupport.pod_runner.pod_status import conditions, phase
from testsupport.pod_runner.probes import ProbeState
from testsupport.pod_runner.raycluster import process_backed
from testsupport.pod_runner.sandbox import Mount, sandbox_argv
from testsupport.pod_runner.service_dns import hosts_block, hosts_file

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "a", "tier": "t"}, "annotations": {}},
    "spec": {"nodeName": "n-0", "serviceAccountName": "sa", "containers": [{"name": "c"}]},
    "status": {"podIP": "127.9.1.2", "podIPs": [{"ip": "127.9.1.2"}], "hostIP": "127.9.1.1"},
}


def lookup(kind: str, namespace: str, name: str) -> dict[str, str] | None:
    return {("configmap", "cm"): {"k": "from-cm"}, ("secret", "s"): {"pw": "hunter2"}}.get((kind, name))


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("$(A)-$(B)", "1-$(B)"),  # an undefined name is kept as written
        ("$$(A)", "$(A)"),  # escaped
        ("cost: $$5", "cost: $5"),
        ("$(A", "$(A"),  # incomplete
        ("$x $", "$x $"),
        ("$((20000 + 1))", "$((20000 + 1))"),  # shell arithmetic passes through to the shell
    ],
)
def test_expand_follows_the_kubelet(text: str, expanded: str) -> None:
    assert expand(text, {"A": "1"}) == expanded


def env_of(container: dict[str, Any], **kw: Any) -> dict[str, str]:
    return container_env(POD, {"name": "c", **container}, lookup=lookup, allocatable={"cpu": "4"}, **kw)


def test_env_sees_only_earlier_variables_and_resolves_references() -> None:
    env = env_of(
        {
            "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
            "env": [
                {"name": "LATE", "value": "$(IP)"},  # IP is defined after: kept
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "URL", "value": "http://$(IP):$(PORT)"},
                {"name": "TIER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}},
                {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
                {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "0"}}},
                {"name": "GONE", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k", "optional": True}}},
            ],
        },
        base={"PORT": "80"},
    )
    assert env["LATE"] == "$(IP)" and env["URL"] == "http://127.9.1.2:80" and env["CM_k"] == "from-cm"
    assert (env["TIER"], env["PW"], env["CPUS"]) == ("t", "hunter2", "4")  # no limit: the node's allocatable
    assert "GONE" not in env


def test_base_env_points_at_the_api_server_and_the_virtualenv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not passed")
    env = base_env(hostname="p", home=Path("/h"), bin_dir=Path("/v/bin"), api_host="127.0.0.1", api_port=6443)
    assert env["PATH"].startswith("/v/bin:") and env["HOME"] == "/h" and env["HOSTNAME"] == "p"
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", "6443")
    assert env["KUBERNETES_PORT"] == "tcp://127.0.0.1:6443" and env["HF_HUB_OFFLINE"] == "1"
    assert "AWS_SECRET_ACCESS_KEY" not in env


def test_memory_requests_round_up_by_the_divisor() -> None:
    ref = {"resourceFieldRef": {"resource": "requests.memory", "divisor": "1Mi"}}
    env = env_of({"env": [{"name": "M", "valueFrom": ref}], "resources": {"requests": {"memory": "1500Ki"}}})
    assert env["M"] == "2"


@pytest.mark.parametrize(
    ("var", "says"),
    [
        ({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "missing"}}}, "env X: ConfigMap ns/cm"),
        ({"name": "Y", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}, "'spec.bogus' is not supported"),
    ],
)
def test_unresolvable_references_name_the_variable(var: dict[str, Any], says: str) -> None:
    with pytest.raises(EnvError, match=says):
        env_of({"env": [var]})


def test_pools_and_taints_parse_or_say_what_is_wrong() -> None:
    pool = parse_pool("ray:3:day0.io/accel=1,nvidia.com/gpu=8")
    assert (pool.name, pool.count, pool.resources) == ("ray", 3, {"day0.io/accel": 1, "nvidia.com/gpu": 8})
    assert parse_taint("k=v:NoSchedule") == {"key": "k", "value": "v", "effect": "NoSchedule"}
    for bad in ("ray", "ray:x", "ray:1:gpu"):
        with pytest.raises(ValueError, match="--pool"):
            parse_pool(bad)
    with pytest.raises(ValueError, match="NoSchedule"):
        parse_taint("k=v:Sometimes")


def test_the_command_line_refuses_bad_pools_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--kubeconfig", "/nowhere", "--pool", "Bad_Name:1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--pool: name: String should match pattern" in err, err


def test_probe_thresholds() -> None:
    state = ProbeState({"initialDelaySeconds": 5, "periodSeconds": 2, "failureThreshold": 2, "successThreshold": 2})
    t0 = state.started_at
    assert not state.due(t0 + 4.9) and state.due(t0 + 5)
    assert not state.record(True, t0 + 5) and not state.ok  # one success of two needed
    assert state.record(True, t0 + 7) and state.ok
    assert not state.record(False, t0 + 9) and state.ok and not state.failed
    assert state.record(False, t0 + 11) and not state.ok and state.failed
    assert not state.due(t0 + 12.9) and state.due(t0 + 13)


def test_mounts_are_staged_then_bound_parents_first(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "ray").mkdir()
    mounts = [Mount(tmp_path / "ray", "/tmp/ray"), Mount(tmp_path / "tmp", "/tmp", read_only=True)]
    argv = sandbox_argv(["ray", "start"], mounts, tmp_path / "stage", "pod-a", None)
    assert argv[:4] == ["setpriv", "--pdeathsig", "KILL", "--"] and "--kill-child" in argv
    assert argv[-2:] == ["ray", "start"]
    script = argv[argv.index("-c") + 1].splitlines()
    binds = [line for line in script if line.startswith("mount --bind")]
    assert binds[:2] == [
        f"mount --bind {tmp_path}/ray {tmp_path}/stage/0",
        f"mount --bind {tmp_path}/tmp {tmp_path}/stage/1",
    ]
    assert binds[2:] == [f"mount --bind {tmp_path}/stage/1 /tmp", f"mount --bind {tmp_path}/stage/0 /tmp/ray"]
    assert "mount -o remount,bind,ro /tmp" in script and script[-1] == 'exec "$@"'


def _pod(name: str, ip: str, *, ready: bool = False, created: str = "", **meta: Any) -> dict[str, Any]:
    conds = [{"type": "Ready", "status": "True"}] if ready else []
    metadata = {"name": name, "namespace": "ns", "labels": {"app": "a"}, "creationTimestamp": created, **meta}
    return {"metadata": metadata, "spec": {}, "status": {"podIP": ip, "conditions": conds}}


def test_services_resolve_to_a_ready_then_the_oldest_pod_of_this_runner() -> None:
    svc = {"metadata": {"name": "head", "namespace": "ns"}, "spec": {"selector": {"app": "a"}}}
    pods = [
        _pod("old", "127.9.1.1", created="2025-01-01T00:00:00Z"),
        _pod("ready", "127.9.1.2", ready=True, created="2025-01-02T00:00:00Z"),
        _pod("other-runner", "127.8.1.3", ready=True, created="2024-01-01T00:00:00Z"),
        _pod("deleting", "127.9.1.4", ready=True, created="2024-01-01T00:00:00Z", deletionTimestamp="x"),
    ]
    block = hosts_block("10.0.0.1", [svc], pods, "127.9.")
    assert block.splitlines() == [
        "10.0.0.1\tkubernetes kubernetes.default kubernetes.default.svc kubernetes.default.svc.cluster.local",
        "127.9.1.2\thead.ns.svc.cluster.local head.ns.svc head.ns head",
    ]
    unready = hosts_block("api.example", [svc], pods[:1], "127.9.")  # a host name: no `kubernetes` line
    assert unready == "127.9.1.1\thead.ns.svc.cluster.local head.ns.svc head.ns head\n"
    assert hosts_block("api.example", [{**svc, "spec": {}}], pods, "127.9.") == ""  # no selector: no endpoint
    pod = {"metadata": {"name": "p"}, "spec": {"hostname": "h"}, "status": {"podIP": "127.9.1.2"}}
    assert hosts_file(pod, block).splitlines()[:3] == [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "127.9.1.2\th",
    ]


def test_pod_phase_and_conditions_follow_its_containers() -> None:
    init, main_ = ContainerRun({"name": "init"}, init=True), ContainerRun({"name": "c"})
    transitions: dict[str, tuple[str, str]] = {}
    assert phase([init], [main_], "Always", None) == "Pending"
    init.exit_code = 1
    assert phase([init], [main_], "Always", None) == "Pending"
    assert phase([init], [main_], "Never", None) == "Failed"
    init.exit_code = 0
    main_.started_at, main_.ready, main_.state = "t", True, {"running": {}}
    main_.proc = cast(Any, object())  # stands for a running process
    assert phase([init], [main_], "Always", None) == "Running"
    assert phase([init], [main_], "Always", ("CreateContainerConfigError", "m")) == "Pending"
    ready = {c["type"]: c["status"] for c in conditions([init], [main_], None, transitions)}
    assert ready == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    initialized = transitions["Initialized"]
    main_.ready = False
    assert {c["type"]: c["status"] for c in conditions([init], [main_], None, transitions)}["Ready"] == "False"
    assert transitions["Ready"][0] == "False" and transitions["Initialized"] == initialized  # only flips move
    main_.proc, main_.state, main_.exit_code = None, {"terminated": {}}, 0
    assert phase([init], [main_], "Never", None) == "Succeeded"
    main_.exit_code = 2
    assert phase([init], [main_], "Never", None) == "Failed"


# --- the spec options a process-backed RayCluster needs -------------------------------------------


def cluster(**extra: Any) -> ClusterSpec:
    acc = {"resource": "day0.io/accel", "per_node": 1, "memory_gib": 1}
    return ClusterSpec.model_validate(
        {
            "backend": "kuberay",
            "node_pools": [
                {"name": "a", "accelerator": acc, "nodes": 1, "ray_start_params": {"metrics-export-port": "9001"}},
                {"name": "e", "accelerator": acc, "elastic": {"min": 0, "max": 1}},
            ],
            **extra,
        }
    )


def test_ray_start_params_and_pod_env_reach_every_group_and_the_autoscaler() -> None:
    options = {
        "ray_start_params": {"node-ip-address": "$(MY_POD_IP)", "metrics-export-port": "9000"},
        "pod_env": [{"name": "MY_POD_IP", "field_path": "status.podIP"}, {"name": "MODE", "value": "test"}],
    }
    spec = build_raycluster(cluster(**options), "run")["spec"]
    head, (a, e) = spec["headGroupSpec"], spec["workerGroupSpecs"]
    assert head["rayStartParams"]["node-ip-address"] == "$(MY_POD_IP)" and head["rayStartParams"]["num-cpus"] == "0"
    assert a["rayStartParams"]["metrics-export-port"] == "9001"  # the pool's own wins
    assert e["rayStartParams"]["metrics-export-port"] == "9000" and "resources" in e["rayStartParams"]
    want = [
        {"name": "MY_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "MODE", "value": "test"},
    ]
    home = {"name": "HOME", "value": "/tmp"}  # first: HOME on the writable /tmp (a read-only root)
    pod_ip = {"name": "DAY0_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}  # the dashboard's
    assert head["template"]["spec"]["containers"][0]["env"] == [home, pod_ip, *want]
    for group in (a, e):
        assert group["template"]["spec"]["containers"][0]["env"] == [home, *want]
    assert spec["autoscalerOptions"]["env"] == want


def test_without_options_the_manifest_is_unchanged() -> None:
    spec = build_raycluster(cluster(), "run")["spec"]
    for group in spec["workerGroupSpecs"]:
        assert group["template"]["spec"]["containers"][0]["env"] == [{"name": "HOME", "value": "/tmp"}]
    assert "env" not in spec["autoscalerOptions"]


@pytest.mark.parametrize("var", [{"name": "X"}, {"name": "X", "value": "1", "field_path": "status.podIP"}])
def test_a_pod_env_var_needs_exactly_one_source(var: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="exactly one of 'value' or 'field_path'"):
        cluster(pod_env=[var])


def test_process_backed_adds_the_pod_address_and_ports_of_its_own_per_group() -> None:
    acc = {"resource": "day0.io/accel", "per_node": 1, "memory_gib": 1}
    pools = [{"name": "a", "accelerator": acc, "nodes": 1}, {"name": "e", "accelerator": acc, "elastic": {"max": 1}}]
    spec = ClusterSpec.model_validate(process_backed({"backend": "kuberay", "node_pools": pools}))
    assert spec.ray_start_params["node-ip-address"] == "$(MY_POD_IP)"
    assert [(e.name, e.field_path) for e in spec.pod_env] == [("MY_POD_IP", "status.podIP")]
    agent_ports = [spec.ray_start_params["dashboard-agent-listen-port"]]
    agent_ports += [p.ray_start_params["dashboard-agent-listen-port"] for p in spec.node_pools]
    assert len(set(agent_ports)) == 3


def test_process_backed_refuses_a_pool_that_could_hold_two_pods() -> None:
    acc = {"resource": "day0.io/accel", "per_node": 1, "memory_gib": 1}
    with pytest.raises(ValueError, match=r"node_pools\['e'\]: at most 1 node per pool .* \(got 2\)"):
        process_backed({"node_pools": [{"name": "e", "accelerator": acc, "elastic": {"max": 2}}]})
