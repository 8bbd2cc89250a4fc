"""The RayCluster builder: pure dicts from the cluster spec and the plan (no API server)."""

from __future__ import annotations

import json
import re

import pytest

from day0.backends.kuberay.manifest import (
    build_raycluster,
    cluster_name,
    label_value,
    labels,
    plan_accelerators,
    workers_per_pool,
)
from day0.backends.kuberay.status import ClusterError
from day0.spec.cluster import ClusterSpec

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def two_pools(**extra: object) -> ClusterSpec:
    return ClusterSpec.model_validate(
        {
            "backend": "kuberay",
            "namespace": "day0",
            **extra,
            "node_pools": [
                {
                    "name": "h100-fixed",
                    "accelerator": {"resource": "nvidia.com/gpu", "per_node": 8, "memory_gib": 80},
                    "nodes": 4,
                    "cpus_per_node": 96,
                    "memory_gib_per_node": 1536,
                    "node_selector": {"day0.io/pool": "h100-fixed"},
                },
                {
                    "name": "cloud-elastic",
                    "accelerator": {"resource": "nvidia.com/gpu", "per_node": 8, "memory_gib": 80},
                    "elastic": {"min": 0, "max": 3},
                    "node_selector": {"day0.io/pool": "cloud-elastic"},
                    "tolerations": [{"key": "day0.io/elastic", "operator": "Exists", "effect": "NoSchedule"}],
                },
            ],
        }
    )


def test_names_are_dns_labels_unique_per_run() -> None:
    a, b = cluster_name("Flow Run/2024_01 ÄÖ"), cluster_name("flow-run-2024-01")
    assert DNS1035.match(a) and DNS1035.match(b) and a != b
    long = cluster_name("x" * 300)
    assert len(long) <= 40 and DNS1035.match(long)
    assert cluster_name("123-abc").startswith("day0-abc-")
    assert cluster_name("same") == cluster_name("same")


def test_label_values_valid_and_unique() -> None:
    assert label_value("run-1") == "run-1"
    for raw in ("a/b c", "-x-" * 40, "ünïcode"):
        value = label_value(raw)
        assert len(value) <= 63 and re.match(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", value), value
    assert label_value("a/b") != label_value("a b")


def test_standard_labels_carry_run_id() -> None:
    meta = labels("run 7", "day0-run-7-abc")
    assert meta["app.kubernetes.io/name"] == "day0" and meta["app.kubernetes.io/instance"] == "day0-run-7-abc"
    assert meta["app.kubernetes.io/managed-by"] == "day0" and meta["day0.io/run-id"] == label_value("run 7")


def test_plan_world_size() -> None:
    assert (
        plan_accelerators({"tensor_parallel": 8, "pipeline_parallel": 4, "expert_parallel": 8, "data_parallel": 2})
        == 64
    )
    assert plan_accelerators(type("P", (), {"tensor_parallel": 2, "data_parallel": 3})()) == 6


def test_workers_fill_fixed_then_elastic() -> None:
    spec = two_pools()
    assert workers_per_pool(spec) == {"h100-fixed": 4, "cloud-elastic": 0}
    assert workers_per_pool(spec, 16) == {"h100-fixed": 2, "cloud-elastic": 0}
    assert workers_per_pool(spec, 48) == {"h100-fixed": 4, "cloud-elastic": 2}
    with pytest.raises(ClusterError, match=r"needs 64 accelerators.*hold only 56"):
        workers_per_pool(spec, 64)


def test_manifest_shape() -> None:
    rc = build_raycluster(
        two_pools(),
        "run-42",
        plan={"tensor_parallel": 8, "data_parallel": 5},
        image="rayproject/ray:2.60.0-py311",
        head_node_selector={"day0.io/role": "cpu"},
    )
    assert rc["apiVersion"] == "ray.io/v1" and rc["kind"] == "RayCluster"
    meta = rc["metadata"]
    assert meta["namespace"] == "day0" and meta["labels"]["day0.io/run-id"] == "run-42"
    assert meta["annotations"]["day0.io/run-id"] == "run-42"
    spec = rc["spec"]
    assert spec["rayVersion"] == "2.60.0" and spec["enableInTreeAutoscaling"] is True
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert head["template"]["spec"]["nodeSelector"] == {"day0.io/role": "cpu"}
    assert "nvidia.com/gpu" not in head["template"]["spec"]["containers"][0]["resources"]["limits"]
    fixed, elastic = spec["workerGroupSpecs"]
    assert (fixed["groupName"], fixed["replicas"], fixed["minReplicas"], fixed["maxReplicas"]) == (
        "h100-fixed",
        4,
        4,
        4,
    )
    assert (elastic["replicas"], elastic["minReplicas"], elastic["maxReplicas"]) == (1, 0, 3)
    pod = elastic["template"]["spec"]
    assert pod["nodeSelector"] == {"day0.io/pool": "cloud-elastic"}
    assert {"key": "day0.io/elastic", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 8 and limits["cpu"] == "14"
    assert elastic["rayStartParams"]["num-gpus"] == "8"
    assert json.loads(json.loads(elastic["rayStartParams"]["resources"])) == {"day0_driver": 1}
    assert "resources" not in head["rayStartParams"]  # no driver slot: jobs never run on the head
    assert elastic["template"]["metadata"]["labels"]["day0.io/pool"] == "cloud-elastic"
    json.dumps(rc)  # plain data only


def test_fixed_only_has_no_autoscaler_and_custom_accelerators() -> None:
    spec = ClusterSpec.model_validate(
        {
            "backend": "kuberay",
            "node_pools": [
                {
                    "name": "npu",
                    "accelerator": {"resource": "huawei.com/Ascend910", "per_node": 8, "memory_gib": 64},
                    "nodes": 2,
                }
            ],
        }
    )
    rc = build_raycluster(spec, "r", image="rayproject/ray:2.60.0-py311")
    assert "enableInTreeAutoscaling" not in rc["spec"]
    group = rc["spec"]["workerGroupSpecs"][0]
    assert json.loads(json.loads(group["rayStartParams"]["resources"])) == {"Ascend910": 8, "day0_driver": 1}
    assert group["template"]["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] == 8


def test_explicit_workers_and_errors() -> None:
    rc = build_raycluster(two_pools(), "r", workers={"h100-fixed": 1, "cloud-elastic": 3}, image="ray:2.60.0")
    assert [g["replicas"] for g in rc["spec"]["workerGroupSpecs"]] == [1, 3]
    with pytest.raises(ClusterError, match="unknown pools"):
        build_raycluster(two_pools(), "r", workers={"nope": 1}, image="ray:2.60.0")
    with pytest.raises(ClusterError, match="node_pools is empty"):
        build_raycluster(ClusterSpec(backend="kuberay"), "r", image="ray:2.60.0")


def test_the_image_is_the_specs_else_days_and_ray_version_is_the_installed_one() -> None:
    from importlib.metadata import version

    from day0 import __version__

    rc = build_raycluster(two_pools(), "r")
    containers = [
        c
        for g in [rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]]
        for c in g["template"]["spec"]["containers"]
    ]
    assert {c["image"] for c in containers} == {f"day0:{__version__}"}
    assert rc["spec"]["rayVersion"] == version("ray")
    rc = build_raycluster(two_pools(image="registry.example/ml/day0:1.2.3"), "r")
    assert rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/ml/day0:1.2.3"
    with pytest.raises(ValueError, match="image"):
        two_pools(image="day0:1 ; rm -rf /")


def test_store_credentials_come_from_the_secret_in_every_ray_container_but_the_autoscaler() -> None:
    rc = build_raycluster(two_pools(store_secret="day0-s3"), "r")
    groups = [rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]]
    for group in groups:
        (container,) = group["template"]["spec"]["containers"]
        secret_env = [e for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in secret_env}
        assert refs == {
            "DAY0_STORE_ACCESS_KEY_ID": {"name": "day0-s3", "key": "access-key-id"},
            "DAY0_STORE_SECRET_ACCESS_KEY": {"name": "day0-s3", "key": "secret-access-key"},
        }
        # no literal credential anywhere: the one plain value is HOME, on the writable /tmp
        assert [e for e in container["env"] if "value" in e] == [{"name": "HOME", "value": "/tmp"}]
    assert "env" not in rc["spec"]["autoscalerOptions"]
    bare = build_raycluster(two_pools(), "r")
    for group in bare["spec"]["workerGroupSpecs"]:
        assert group["template"]["spec"]["containers"][0]["env"] == [{"name": "HOME", "value": "/tmp"}]
    with pytest.raises(ValueError, match="store_secret"):
        two_pools(store_secret="Not A Name")


def test_ray_token_auth_is_on_and_the_dashboard_binds_the_head_pods_own_address() -> None:
    """KubeRay's `authOptions` asks for Ray's token mode (KubeRay then creates the token Secret and
    the pods' RAY_AUTH_* env); the dashboard listens on the pod IP, expanded by the kubelet from the
    downward API, not on 0.0.0.0; a spec's own `dashboard-host` still wins."""
    spec = build_raycluster(two_pools(), "r")["spec"]
    assert spec["authOptions"] == {"mode": "token"}
    head = spec["headGroupSpec"]
    (container,) = head["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert head["rayStartParams"]["dashboard-host"] == "$(DAY0_POD_IP)"
    assert env["DAY0_POD_IP"] == {"name": "DAY0_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    for group in spec["workerGroupSpecs"]:  # no day0 auth env: KubeRay adds RAY_AUTH_MODE/RAY_AUTH_TOKEN itself
        assert not [e for e in group["template"]["spec"]["containers"][0]["env"] if e["name"].startswith("RAY_AUTH")]
    own = build_raycluster(two_pools(ray_start_params={"dashboard-host": "0.0.0.0"}), "r")["spec"]
    assert own["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "0.0.0.0"


def test_a_jobs_driver_asks_for_a_workers_driver_slot_and_step_6s_also_for_an_accelerator() -> None:
    from day0.backends.resources import driver_placement
    from day0.spec.cluster import PlatformSpec

    platform = PlatformSpec.model_validate(
        {
            "name": "gpu",
            "device_type": "cuda",
            "hardware": {
                "memory_gib": 80,
                "bf16_tflops": 989,
                "intra_node_bandwidth_gbps": 450,
                "inter_node_bandwidth_gbps": 50,
            },
        }
    )
    assert driver_placement(platform, two_pools(), False) == {"entrypoint_resources": {"day0_driver": 1}}
    assert driver_placement(platform, two_pools(), True) == {
        "entrypoint_num_gpus": 1,
        "entrypoint_resources": {"day0_driver": 1},
    }
    npu = ClusterSpec.model_validate(
        {
            "backend": "kuberay",
            "node_pools": [
                {
                    "name": "npu",
                    "accelerator": {"resource": "huawei.com/Ascend910", "per_node": 8, "memory_gib": 64},
                    "nodes": 1,
                }
            ],
        }
    )
    assert driver_placement(platform, npu, True) == {"entrypoint_resources": {"day0_driver": 1, "Ascend910": 1}}


TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.mark.parametrize("elastic", [True, False], ids=["autoscaled", "fixed"])
def test_every_ray_pod_is_locked_down_and_holds_no_token(elastic: bool) -> None:
    """Non-root, read-only root with /tmp writable (Ray's session dirs, HOME), no capabilities, no
    privilege escalation, RuntimeDefault seccomp, the spec's rightless account, no token mounted."""
    cluster = two_pools(service_account="r-day0-ray", store_secret="day0-s3")
    if not elastic:
        cluster = cluster.model_copy(update={"node_pools": cluster.node_pools[:1]})
    spec = build_raycluster(cluster, "run-1")["spec"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    assert len(groups) == (3 if elastic else 2)
    for group in groups:
        pod = group["template"]["spec"]
        is_head = group is spec["headGroupSpec"]
        assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
        assert pod["automountServiceAccountToken"] is False
        # an autoscaled head keeps KubeRay's per-cluster autoscaler account (only its autoscaler holds the token)
        assert pod.get("serviceAccountName") == (None if is_head and elastic else "r-day0-ray")
        assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]
        (container,) = pod["containers"]
        assert container["securityContext"] == {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
        assert {"name": "HOME", "value": "/tmp"} in container["env"]
        assert not any(m["mountPath"] == TOKEN_PATH for m in container["volumeMounts"])
    autoscaler = spec.get("autoscalerOptions")
    if not elastic:
        assert autoscaler is None
        return
    assert autoscaler["securityContext"]["readOnlyRootFilesystem"] is True
    assert autoscaler["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    (token,) = [m for m in autoscaler["volumeMounts"] if m["mountPath"] == TOKEN_PATH]
    (volume,) = [v for v in spec["headGroupSpec"]["template"]["spec"]["volumes"] if v["name"] == token["name"]]
    assert {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}} in volume["projected"]["sources"]


def test_a_home_of_the_specs_own_wins_and_no_account_means_none_named() -> None:
    spec = build_raycluster(two_pools(pod_env=[{"name": "HOME", "value": "/tmp/home"}]), "r")["spec"]
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        pod = group["template"]["spec"]
        assert [e for e in pod["containers"][0]["env"] if e["name"] == "HOME"] == [
            {"name": "HOME", "value": "/tmp/home"}
        ]
        assert "serviceAccountName" not in pod and pod["automountServiceAccountToken"] is False


@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease", "default"])
def test_a_system_namespace_is_refused(namespace: str) -> None:
    with pytest.raises(ValueError, match=f"'{namespace}' is a system namespace"):
        two_pools(namespace=namespace)
