"""The Helm chart (helm/day0) with real helm and kubectl against the test control plane.

Lint and render (defaults and helm/day0/ci/*.yaml, accepted by the API server's server-side dry
run with KubeRay's CRDs installed), the schema and the template refusing bad values by name, the
plain manifests in k8s/install/ equal to the chart, install (pod specs and RBAC as the values say,
least privilege checked by impersonating the service accounts), upgrade (a pool size reaches the
cluster-spec ConfigMap and the RayCluster built from it, nothing restarts), uninstall (nothing
left), and the work pool's base job template and deployments on a real Prefect server.
kwok pods run no processes: what runs inside them is covered where it can run (see docs/development/testing.md).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from day0.backends.kuberay.manifest import build_raycluster
from day0.spec.cluster import NodePool
from day0.spec.pipeline import spec_from_dict

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "day0"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
E2E_VALUES = REPO / "tests" / "data" / "helm" / "e2e-values.yaml"
MINIMAL = {"metadata": {"name": "t"}, "model": "tiny-deepseek-v3", "platform": "cpu"}


@functools.cache
def _bin(var: str, name: str) -> str:
    """A binary k8s/build.sh installed (looked up when first used: the e2e bring-up builds it after collection)."""
    out = subprocess.run(
        ["bash", "-c", f"source {REPO}/k8s/env.sh && echo ${var}"], check=True, capture_output=True, text=True
    )
    path = Path(out.stdout.strip()) / name
    assert path.is_file(), f"{path} missing: k8s/build.sh builds it (the e2e bring-up runs it)"
    return str(path)


def run(*cmd: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=300)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} -> rc {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(_bin("HELM_BIN", "helm"), *args, check=check)


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(_bin("KUBECTL_BIN", "kubectl"), *args, stdin=stdin, check=check)


def render(*args: str, release: str = "r", namespace: str = "default") -> list[dict[str, Any]]:
    out = helm("template", release, str(CHART), "--namespace", namespace, *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def find(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(hits) == 1, f"{kind} *{suffix}: {[d['metadata']['name'] for d in docs if d['kind'] == kind]}"
    return hits[0]


def pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in docs if d["kind"] == "Deployment"]
    return out + [(d["metadata"]["name"], d["spec"]) for d in docs if d["kind"] == "Pod"]


@pytest.fixture
def namespace(api: Any) -> Iterator[str]:
    """A namespace of this test's own, deleted afterwards."""
    from kubernetes import client

    name = f"helm-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    for release in helm("list", "-n", name, "-q").stdout.split():  # a failed test's release: its ClusterRoles too
        helm("uninstall", release, "-n", name, "--wait", "--timeout", "120s", check=False)
    core.delete_namespace(name)


# --- lint and render ---------------------------------------------------------------------------


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.stem if v else "defaults")
def test_lint_is_clean(values: Path | None) -> None:
    out = helm("lint", "--strict", str(CHART), *(["-f", str(values)] if values else [])).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out and "[WARNING]" not in out and "[ERROR]" not in out


@pytest.mark.parametrize("values", [None, *CI_VALUES, E2E_VALUES], ids=lambda v: v.stem if v else "defaults")
def test_rendered_manifests_pass_the_api_servers_dry_run(values: Path | None, namespace: str, api: Any) -> None:
    from kubernetes import client

    args = ["-f", str(values)] if values else []
    docs = render(*args, namespace=namespace)
    runs = find(docs, "Namespace", "-runs")["metadata"]["name"]
    assert runs == f"{namespace}-runs"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": runs}})  # a dry run creates nothing to put objects in
    try:
        for doc in docs:  # what helm install does: the release namespace for objects that name none
            if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
                doc["metadata"].setdefault("namespace", namespace)
        applied = kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(docs)).stdout
    finally:
        client.CoreV1Api(api).delete_namespace(runs)
    assert applied.count("(server dry run)") == len(docs), applied
    for doc in docs:  # the chart's conventions, on every object
        labels = doc["metadata"]["labels"]
        assert {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"} <= set(labels)
    for name, spec in pod_specs(docs):
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c["securityContext"]
            assert sc["capabilities"]["drop"] == ["ALL"] and sc["readOnlyRootFilesystem"] is True, (name, c["name"])
            assert sc["allowPrivilegeEscalation"] is False and sc["seccompProfile"]["type"] == "RuntimeDefault"
            assert c["resources"]["requests"] and c["resources"]["limits"], (name, c["name"])
        for c in spec["containers"] if spec.get("restartPolicy") != "Never" else []:  # long-running ones
            assert c["readinessProbe"] and c["livenessProbe"], (name, c["name"])


def test_the_test_hook_asks_the_webhook_service() -> None:
    docs = render()
    hook = find(docs, "Pod", "-webhook-test")
    assert hook["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = hook["spec"]["containers"][0]["command"][-1]
    svc = find(docs, "Service", "-webhook")
    assert f"http://{svc['metadata']['name']}.default.svc:{svc['spec']['ports'][0]['port']}/healthz" in script


# --- bad values --------------------------------------------------------------------------------

BAD = [
    ("clusterSpec.nodePools.gpu-fixed.nodes=-1", "/clusterSpec/nodePools/gpu-fixed/nodes"),
    ("clusterSpec.nodePools.gpu-fixed.accelerator.per_node=0", "/clusterSpec/nodePools/gpu-fixed/accelerator/per_node"),
    ("clusterSpec.nodePools.Bad_Pool.nodes=1", "invalid propertyName 'Bad_Pool'"),
    ("clusterSpec.nodePools.gpu-fixed.elastic.max=4", "clusterSpec.nodePools.gpu-fixed: set exactly one of nodes"),
    ("clusterSpec.nodePools.gpu-elastic.elastic.min=9", "clusterSpec.nodePools.gpu-elastic.elastic: min (9)"),
    ("webhook.port=99999", "/webhook/port"),
    ("workPool.jobDefaults.acceleratorCount=two", "/workPool/jobDefaults/acceleratorCount"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("containerSecurityContext.allowPrivilegeEscalation=true", "/containerSecurityContext/allowPrivilegeEscalation"),
    ("regression.cron=nightly", "/regression/cron"),
    ("runs.crashSettleSeconds=5", "/runs/crashSettleSeconds"),  # under Prefect's least trigger window
    ("runs.leaseSeconds=0", "/runs/leaseSeconds"),
    ("webhok.port=1", "additional properties 'webhok' not allowed"),
    ("prefectServer.enabled=false", "prefect.apiUrl is required"),
    ("webhook.ingress.enabled=true", "webhook.ingress.host is required"),
]


@pytest.mark.parametrize(("setting", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_values_are_refused_naming_the_value(setting: str, message: str) -> None:
    done = helm("template", "r", str(CHART), "--set", setting, check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_the_schema_knows_every_field_of_a_node_pool() -> None:
    """values.schema.json's node pool mirrors day0.spec.NodePool (name is the key)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    fields = set(schema["definitions"]["nodePool"]["properties"]) | {"name"}
    assert fields == set(NodePool.model_fields)


def test_the_cluster_configmap_sets_every_cluster_spec_field() -> None:
    """Nothing of day0.spec.ClusterSpec is left to a default the chart cannot change (address is
    the local backend's)."""
    from day0.spec.cluster import ClusterSpec

    (text,) = find(render(), "ConfigMap", "-clusters")["data"].values()
    assert set(yaml.safe_load(text)) == set(ClusterSpec.model_fields) - {"address"}


def test_runs_get_a_namespace_of_their_own() -> None:
    """Flow-run Jobs, RayClusters and the rights to them live in `<release ns>-runs`; the release
    namespace holds only the control pods; runs.namespace may not be the release namespace."""
    docs = render(namespace="ops")
    (ns,) = [d for d in docs if d["kind"] == "Namespace"]
    assert ns["metadata"]["name"] == "ops-runs"
    template = json.loads(find(docs, "ConfigMap", "-work-pool")["data"]["base-job-template.json"])
    assert template["job_configuration"]["namespace"] == "ops-runs"  # fixed: no run may choose another
    (text,) = find(docs, "ConfigMap", "-clusters")["data"].values()
    assert yaml.safe_load(text)["namespace"] == "ops-runs"
    for kind in ("Role", "RoleBinding"):
        assert {d["metadata"]["namespace"] for d in docs if d["kind"] == kind} == {"ops-runs"}, kind
    assert find(docs, "ServiceAccount", "-runner")["metadata"]["namespace"] == "ops-runs"
    assert find(docs, "ServiceAccount", "-ray")["metadata"]["namespace"] == "ops-runs"
    assert "namespace" not in find(docs, "ServiceAccount", "-worker")["metadata"]  # the release namespace
    worker = find(docs, "Deployment", "-worker")["spec"]["template"]["spec"]["containers"][0]
    observed = {e["name"]: e.get("value") for e in worker["env"]}["PREFECT_INTEGRATIONS_KUBERNETES_OBSERVER_NAMESPACES"]
    assert observed == "ops-runs"
    assert not [d for d in render("--set", "runs.createNamespace=false", namespace="ops") if d["kind"] == "Namespace"]
    own = render("--set", "runs.namespace=gpu-runs", namespace="ops")
    assert find(own, "ServiceAccount", "-runner")["metadata"]["namespace"] == "gpu-runs"
    done = helm("template", "r", str(CHART), "-n", "ops", "--set", "runs.namespace=ops", check=False)
    assert done.returncode != 0 and 'runs.namespace: "ops" is the release namespace' in done.stderr, done.stderr


# --- the plain manifests -----------------------------------------------------------------------


def test_plain_manifests_equal_the_chart() -> None:
    rendered = run(str(REPO / "k8s" / "render-install.sh"), "--stdout").stdout
    assert (REPO / "k8s" / "install" / "day0.yaml").read_text() == rendered, "rerun k8s/render-install.sh"


# --- the cluster spec the flows read -----------------------------------------------------------


def _mounted_cluster(configmap: dict[str, Any], into: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Write the ConfigMap's files as the kubelet mounts them; point DAY0_CLUSTERS_DIR there."""
    into.mkdir(parents=True, exist_ok=True)
    for key, text in configmap["data"].items():
        (into / key).write_text(text)
    monkeypatch.setenv("DAY0_CLUSTERS_DIR", str(into))
    (name,) = [k.removesuffix(".yaml") for k in configmap["data"]]
    return name


DEFAULT_POOLS = {"gpu-elastic": (0, 8), "gpu-fixed": (4, 4)}
POOLS = {"ascend-npu-values": {"npu-burst": (2, 64), "npu-fixed": (256, 256)}}  # (min, max) nodes


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.stem if v else "defaults")
def test_the_cluster_configmap_is_a_cluster_spec(
    values: Path | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a flow-run pod reads through DAY0_CLUSTERS_DIR is a valid ClusterSpec with the values' pools."""
    docs = render(*(["-f", str(values)] if values else []))
    name = _mounted_cluster(find(docs, "ConfigMap", "-clusters"), tmp_path, monkeypatch)
    cluster = spec_from_dict({**MINIMAL, "cluster": name}).cluster
    assert cluster.backend == "kuberay" and cluster.namespace == "default-runs"
    sizes = {p.name: (p.elastic.min, p.elastic.max) if p.elastic else (p.nodes, p.nodes) for p in cluster.node_pools}
    assert sizes == POOLS.get(values.stem if values else "", DEFAULT_POOLS)
    groups = build_raycluster(cluster, "helm-render")["spec"]["workerGroupSpecs"]
    assert {g["groupName"]: (g["minReplicas"], g["maxReplicas"]) for g in groups} == sizes


def test_a_release_runs_on_the_installs_cluster_and_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The receiver's watch list and release spec come from values; the spec a delivery makes is a valid
    spec for this install's cluster spec and store (never `cluster: local` or a file:// store)."""
    from day0.webhook.settings import load_watch

    docs = render("--set", "webhook.watch.orgs={acme}", "--set", "webhook.releaseSpec.trial.steps=7")
    _mounted_cluster(find(docs, "ConfigMap", "-clusters"), tmp_path / "clusters", monkeypatch)
    for key, text in find(docs, "ConfigMap", "-webhook-watch")["data"].items():
        (tmp_path / key).write_text(text)
    env = {
        e["name"]: e for e in find(docs, "Deployment", "-webhook")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["DAY0_WEBHOOK_WATCH"]["value"] == "/etc/day0/webhook/watch.yaml"
    watch = load_watch(tmp_path / "watch.yaml")
    assert watch.watch.orgs == ["acme"] and watch.deployment == "adapt/release"
    spec = spec_from_dict(watch.build_spec("acme/new-model", "a" * 40))
    assert spec.model.source == f"hf://acme/new-model@{'a' * 40}" and spec.trial.steps == 7
    assert (spec.cluster.backend, spec.cluster.namespace, spec.storage) == (
        "kuberay",
        "default-runs",
        "s3://day0-artifacts/runs",
    )
    done = helm("template", "r", str(CHART), "--set", "webhook.releaseSpec.storage=file:///tmp", check=False)
    assert done.returncode != 0 and "/webhook/releaseSpec" in done.stderr, done.stderr


# --- install, least privilege, upgrade, uninstall ----------------------------------------------


def can_i(namespace: str, sa: str, verb: str, resource: str, ns: str | None = None) -> bool:
    """`kubectl auth can-i` as the service account; `pods/log` means the subresource."""
    resource, _, sub = resource.partition("/")
    done = kubectl(
        "auth", "can-i", verb, resource, *([f"--subresource={sub}"] if sub else []), "-n", ns or namespace,
        "--as", f"system:serviceaccount:{namespace}:{sa}", check=False,
    )  # fmt: skip
    assert done.stdout.strip() in ("yes", "no"), done.stdout + done.stderr
    return done.stdout.strip() == "yes"


RUNNER_ALLOWED = [
    ("create", "rayclusters.ray.io"), ("get", "rayclusters.ray.io"), ("list", "rayclusters.ray.io"),
    ("watch", "rayclusters.ray.io"), ("delete", "rayclusters.ray.io"), ("list", "pods"), ("watch", "pods"),
    ("delete", "pods"), ("list", "events"), ("watch", "events"), ("get", "nodes"), ("list", "nodes"),
    ("watch", "nodes"), ("get", "secrets"),
]  # fmt: skip
RUNNER_DENIED = [
    ("update", "rayclusters.ray.io"), ("patch", "rayclusters.ray.io"), ("create", "rayjobs.ray.io"),
    ("create", "pods"), ("get", "pods"), ("create", "pods/portforward"), ("get", "services"), ("list", "secrets"),
    ("list", "configmaps"), ("create", "events"), ("delete", "nodes"), ("patch", "nodes"), ("create", "jobs.batch"),
]  # fmt: skip
WORKER_ALLOWED = [
    ("create", "jobs.batch"), ("get", "jobs.batch"), ("list", "jobs.batch"), ("watch", "jobs.batch"),
    ("delete", "jobs.batch"), ("list", "pods"), ("watch", "pods"), ("get", "pods/log"), ("create", "events"),
]  # fmt: skip
WORKER_DENIED = [
    ("create", "rayclusters.ray.io"), ("delete", "pods"), ("create", "pods"), ("get", "secrets"),
    ("update", "jobs.batch"), ("list", "nodes"), ("create", "pods/exec"),
]  # fmt: skip


def _wait_for_rollout(namespace: str, release: str) -> None:
    for deploy in ("webhook", "worker", "prefect-server"):
        kubectl("rollout", "status", f"deployment/{release}-day0-{deploy}", "-n", namespace, "--timeout=120s")


def test_install_upgrade_uninstall(api: Any, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes import client

    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "day0-e2e-webhook"}, "stringData": {"secret": "s-e2e-webhook-secret"}}
    )
    release = "r"
    helm("install", release, str(CHART), "-n", namespace, "-f", str(E2E_VALUES), "--wait", "--timeout", "180s")
    _wait_for_rollout(namespace, release)

    # The pods are what the values say.
    sel = f"app.kubernetes.io/instance={release}"
    pods = {
        p.metadata.labels["app.kubernetes.io/component"]: p
        for p in core.list_namespaced_pod(namespace, label_selector=sel).items
    }
    assert set(pods) == {"webhook", "worker", "prefect-server"}
    nodes = {n.metadata.name: n.metadata.labels for n in client.CoreV1Api(api).list_node().items}
    for pod in pods.values():
        assert pod.status.phase == "Running" and nodes[pod.spec.node_name].get("day0.io/role") == "cpu"
    hook = pods["webhook"].spec.containers[0]
    assert hook.image == "day0-e2e:test" and hook.command[:3] == ["day0", "webhook", "serve"]
    env = {e.name: e for e in hook.env}
    assert env["DAY0_WEBHOOK_SECRET"].value_from.secret_key_ref.name == "day0-e2e-webhook"
    assert env["DAY0_STORE_ACCESS_KEY_ID"].value_from.secret_key_ref.name == "day0-e2e-s3"
    assert env["DAY0_WEBHOOK_STORE"].value == "s3://day0-e2e/runs"
    assert env["PREFECT_API_URL"].value == f"http://{release}-day0-prefect-server.{namespace}.svc:4200/api"
    assert (
        hook.readiness_probe.http_get.path == "/healthz"
        and pods["webhook"].spec.automount_service_account_token is False
    )
    worker = pods["worker"].spec
    assert worker.service_account_name == f"{release}-day0-worker"
    assert [c.name for c in worker.init_containers] == ["create-work-pool", "register-deployments", "register-recovery"]
    assert worker.init_containers[0].command[:4] == ["prefect", "work-pool", "create", "day0-kubernetes"]

    # Least privilege: what the code calls, nothing else, and only in the runs namespace.
    runs = f"{namespace}-runs"
    assert core.read_namespace(runs).metadata.labels["app.kubernetes.io/instance"] == release
    runner, wsa = f"{release}-day0-runner", f"{release}-day0-worker"
    for verb, res in RUNNER_ALLOWED:
        assert can_i(runs, runner, verb, res), f"runner cannot {verb} {res}"
    for verb, res in RUNNER_DENIED:
        assert not can_i(runs, runner, verb, res), f"runner can {verb} {res}"
    for ns in (namespace, "default"):  # the control pods' namespace above all
        assert not can_i(runs, runner, "delete", "pods", ns=ns), f"runner may delete pods in {ns}"
        assert not can_i(runs, runner, "list", "rayclusters.ray.io", ns=ns), f"runner reaches {ns}"
    for verb, res in WORKER_ALLOWED:
        assert can_i(namespace, wsa, verb, res, ns=runs), f"worker cannot {verb} {res}"
    for verb, res in WORKER_DENIED:
        assert not can_i(namespace, wsa, verb, res, ns=runs), f"worker can {verb} {res}"
    assert not can_i(namespace, wsa, "create", "jobs.batch"), "the worker may create Jobs beside the control pods"
    assert not can_i(namespace, "default", "list", "pods"), "the namespace's default account gained rights"
    for verb, res in (("get", "pods"), ("list", "secrets"), ("create", "rayclusters.ray.io")):  # Ray pods: no rights
        assert not can_i(runs, f"{release}-day0-ray", verb, res), f"the Ray pods' account may {verb} {res}"

    # Upgrade: a pool size and an elastic maximum reach the ConfigMap and the next RayCluster; nothing restarts.
    uids = {p.metadata.uid for p in pods.values()}
    helm(
        "upgrade", release, str(CHART), "-n", namespace, "--reuse-values", "--wait", "--timeout", "120s",
        "--set", "clusterSpec.nodePools.gpu-fixed.nodes=6", "--set", "clusterSpec.nodePools.gpu-elastic.elastic.max=12",
    )  # fmt: skip
    cm = core.read_namespaced_config_map(f"{release}-day0-clusters", runs).to_dict()
    name = _mounted_cluster(cm, tmp_path / "clusters", monkeypatch)
    cluster = spec_from_dict({**MINIMAL, "cluster": name}).cluster
    assert (cluster.namespace, cluster.store_secret, cluster.image) == (runs, "day0-e2e-s3", "day0-e2e:test")
    rc = build_raycluster(cluster, "helm-upgrade")
    groups = {g["groupName"]: g for g in rc["spec"]["workerGroupSpecs"]}
    assert (groups["gpu-fixed"]["replicas"], groups["gpu-fixed"]["maxReplicas"]) == (6, 6)
    assert (groups["gpu-elastic"]["minReplicas"], groups["gpu-elastic"]["maxReplicas"]) == (0, 12)
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object("ray.io", "v1", runs, "rayclusters", rc, dry_run="All")
    after = core.list_namespaced_pod(namespace, label_selector=sel).items
    assert {p.metadata.uid for p in after} == uids, "a pool-size upgrade restarted pods"

    # Uninstall leaves nothing of the release behind, namespaced or cluster-scoped.
    helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "120s")
    kinds = "all,configmaps,serviceaccounts,roles,rolebindings,ingresses"
    for _ in range(60):  # the Deployments are gone at once; their pods follow through the garbage collector
        left = kubectl("get", kinds, "-n", namespace, "-l", sel, "-o", "name").stdout.strip()
        if not left:
            break
        time.sleep(1)
    assert left == "", left
    cluster_scoped = (
        rbac.list_cluster_role(label_selector=sel).items + rbac.list_cluster_role_binding(label_selector=sel).items
    )
    assert [o.metadata.name for o in cluster_scoped if namespace in o.metadata.name] == []
    for _ in range(60):  # the runs namespace goes with the release (Terminating until its contents are gone)
        gone = [n for n in core.list_namespace().items if n.metadata.name == runs and not n.metadata.deletion_timestamp]
        if not gone:
            break
        time.sleep(1)
    assert gone == [], f"namespace {runs} left behind"
    assert helm("list", "-n", namespace, "-q").stdout.strip() == ""


# --- the work pool's base job template and the deployments ------------------------------------


def _flow_run_job(template: dict[str, Any], **job_variables: Any) -> dict[str, Any]:
    """The Job a Kubernetes worker submits for a flow run: the variables' defaults overlaid with a
    deployment's job_variables, made and validated by prefect-kubernetes' own job configuration
    (which refuses a template it cannot run); it then sets the command it runs as args."""
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    props = template["variables"]["properties"]
    values = {k: v["default"] for k, v in props.items() if "default" in v}
    values |= {"name": "day0-flow-run", "labels": {"prefect.io/flow-run-id": str(uuid.uuid4())}} | job_variables
    config = asyncio.run(KubernetesWorkerJobConfiguration.from_template_and_values(template, values))
    job = config.job_manifest
    job["spec"]["template"]["spec"]["containers"][0]["args"] = ["prefect", "flow-run", "execute"]
    return job


def test_the_job_template_puts_flow_runs_on_a_gpu_pool(api: Any, namespace: str, prefect_server: None) -> None:
    """A flow-run Job from the base job template, with a deployment's GPU job variables, is
    accepted by the API server and its pod is scheduled onto the fixed GPU pool with its GPUs."""
    from kubernetes import client

    docs = render("-f", str(E2E_VALUES), namespace=namespace)
    template = json.loads(find(docs, "ConfigMap", "-work-pool")["data"]["base-job-template.json"])
    assert {"node_selector", "tolerations", "accelerator_count"} <= set(template["variables"]["properties"])
    job = _flow_run_job(template, accelerator_count=2)
    runs = job["metadata"]["namespace"]
    assert runs == f"{namespace}-runs"
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["nodeSelector"] == {"day0.io/pool": "gpu-fixed"} and pod["serviceAccountName"] == "r-day0-runner"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert {"name": "DAY0_CLUSTERS_DIR", "value": "/etc/day0/clusters"} in container["env"]
    assert {"name": "clusters", "configMap": {"name": "r-day0-clusters"}} in pod["volumes"]
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": runs}})
    core.create_namespaced_service_account(runs, {"metadata": {"name": "r-day0-runner"}})
    configmap = helm(
        "template",
        "r",
        str(CHART),
        "-n",
        namespace,
        "-f",
        str(E2E_VALUES),
        "--show-only",
        "templates/clusters-configmap.yaml",
    ).stdout
    kubectl("apply", "-n", runs, "-f", "-", stdin=configmap)  # the ConfigMap and the Job live in the runs namespace
    # Sent as JSON, as the worker's client does (integer quantities are fine for the API server).
    # Sent as JSON, as the worker's client does: integer quantities are fine, and the server drops (with a warning,
    # its default for clients that ask for no field validation) the two fields prefect-kubernetes insists on
    # finding in the pod template.
    create = ("create", "--validate=warn", "-n", runs, "-o", "json", "-f", "-")
    name = json.loads(kubectl(*create, stdin=json.dumps(job)).stdout)["metadata"]["name"]
    try:
        sel = f"job-name={name}"
        for _ in range(120):
            pods = core.list_namespaced_pod(runs, label_selector=sel).items
            if pods and pods[0].spec.node_name:
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"flow-run pod not scheduled: {[p.status for p in pods]}")
        node = core.read_node(pods[0].spec.node_name)
        assert node.metadata.labels["day0.io/pool"] == "gpu-fixed" and node.status.allocatable["nvidia.com/gpu"] == "8"
    finally:
        batch.delete_namespaced_job(name, runs, propagation_policy="Background")
        core.delete_namespace(runs)


def test_the_worker_registers_the_pool_and_the_regression_schedule(prefect_server: None, tmp_path: Path) -> None:
    """The worker's init commands, run against a real Prefect server with the rendered files."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    docs = render("--set", "regression.cron=15 4 * * *", "--set", "regression.timezone=Europe/Paris")
    data = find(docs, "ConfigMap", "-work-pool")["data"]
    for key, text in data.items():
        (tmp_path / key).write_text(text)
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    worker = find(docs, "Deployment", "-worker")["spec"]["template"]["spec"]
    for init in worker["initContainers"]:
        files = next(m["mountPath"] for m in init["volumeMounts"] if m["name"] == "work-pool")
        cmd = [str(tmp_path) + a.removeprefix(files) if a.startswith(files) else a for a in init["command"]]
        cmd[0] = str(Path(sys.executable).parent / cmd[0])  # the venv's `prefect`, as the image has it on PATH
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{cmd}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    with get_client(sync_client=True) as prefect:
        pool = prefect.read_work_pool("day0-kubernetes")
        assert pool.type == "kubernetes"
        assert pool.base_job_template == json.loads(data["base-job-template.json"])
        nightly = prefect.read_deployment_by_name("regression/nightly")
        assert nightly.work_pool_name == "day0-kubernetes"
        (schedule,) = nightly.schedules
        assert (schedule.schedule.cron, schedule.schedule.timezone, schedule.active) == (
            "15 4 * * *",
            "Europe/Paris",
            True,
        )
        assert prefect.read_deployment_by_name("adapt/release").work_pool_name == "day0-kubernetes"
        (recovery,) = prefect.read_automations_by_name("day0-rerun-crashed-flow-runs")  # flows/recovery.py
        assert recovery.enabled


# --- a receiver that really runs ---------------------------------------------------------------


def test_the_webhook_really_runs_and_answers_through_its_service(api: Any, namespace: str, tmp_path: Path) -> None:
    """On a pod-runner node (real processes), the receiver pod runs `day0 webhook serve`, its
    readiness probe passes, and the chart's `helm test` pod reaches /healthz through the Service."""
    from kubernetes import client

    from testsupport.pod_runner import PodRunner, Pool

    client.CoreV1Api(api).create_namespaced_secret(
        namespace, {"metadata": {"name": "day0-e2e-webhook"}, "stringData": {"secret": "s-e2e-webhook-secret"}}
    )
    pool, taint = f"{namespace}-run", {"key": "day0.io/helm-test", "operator": "Exists", "effect": "NoSchedule"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    webhook = {
        "secret": {"existingSecret": "day0-e2e-webhook", "key": "secret"},
        "port": port,
        "service": {"port": port},  # no kube-proxy: the Service name resolves to the pod, ports must match
        "nodeSelector": {"day0.io/pool": pool},
        "tolerations": [taint],
    }
    values = tmp_path / "runner-values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "image": {"workdir": str(REPO)},  # the runner runs commands on this machine, not images
                "prefectServer": {"enabled": False},
                "prefect": {"apiUrl": "http://127.0.0.1:9/api", "authSecret": {"name": ""}},  # /healthz: no Prefect
                "store": {"uri": "file:///tmp/day0-store", "volume": {"emptyDir": {}}},  # one receiver: its own volume
                "worker": {"enabled": False},
                "webhook": webhook,
            }
        )
    )
    with PodRunner(api, pools=[Pool(name=pool, count=1, taints=["day0.io/helm-test=true:NoSchedule"])]):
        helm("install", "r", str(CHART), "-n", namespace, "-f", str(values), "--wait", "--timeout", "180s")
        pods = client.CoreV1Api(api).list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=webhook"
        )
        (pod,) = pods.items
        assert pod.spec.node_name.startswith(pool) and pod.status.container_statuses[0].ready
        tested = helm("test", "r", "-n", namespace, "--timeout", "120s").stdout
        assert "r-day0-webhook-test" in tested and "Succeeded" in tested, tested
        helm("uninstall", "r", "-n", namespace, "--wait", "--timeout", "120s")
