"""The chart's values.schema.json and templates/validate.yaml refuse, naming the value, what would
break an install or a running release later; the defaults and helm/day0/ci/*.yaml render.

Offline: `helm template` only (no control plane; tests/e2e/test_helm.py installs the chart). The
helm binary is the one k8s/build.sh installs (found as tests/e2e/test_helm.py finds it), else
`helm` on PATH; without either these tests are skipped, saying so."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.fixtures.paths import REPO

CHART = REPO / "helm" / "day0"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))


@functools.cache
def _helm() -> str | None:
    out = subprocess.run(
        ["bash", "-c", f"source {REPO}/k8s/env.sh && echo $HELM_BIN"], capture_output=True, text=True, check=False
    )
    built = Path(out.stdout.strip()) / "helm" if out.returncode == 0 and out.stdout.strip() else None
    return str(built) if built is not None and built.is_file() else shutil.which("helm")


def helm_template(*args: str, release: str = "r") -> subprocess.CompletedProcess[str]:
    binary = _helm()
    if binary is None:
        pytest.skip("no helm binary: k8s/build.sh helm installs one (or put helm on PATH)")
    return subprocess.run(
        [binary, "template", release, str(CHART), *args], capture_output=True, text=True, timeout=60, check=False
    )


def refused(*args: str, release: str = "r") -> str:
    done = helm_template(*args, release=release)
    assert done.returncode != 0, f"accepted: {args}"
    return done.stderr


def accepted(*args: str) -> list[dict]:
    done = helm_template(*args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def tolerations(where: str, *items: dict) -> tuple[str, str]:
    return ("--set-json", f"{where}={json.dumps(list(items))}")


def pod_env(*items: dict) -> tuple[str, str]:
    return ("--set-json", f"clusterSpec.podEnv={json.dumps(list(items))}")


WRITABLE_ROOT = ("--set", "containerSecurityContext.readOnlyRootFilesystem=false")
STORE_VOLUME = ("--set-json", 'store.volume={"persistentVolumeClaim": {"claimName": "day0-store"}}')

# (id, helm args, what the error says): each a value the API server, KubeRay, Prefect or
# day0.spec would refuse later, at install or during a run.
BAD: list[tuple[str, tuple[str, ...], str]] = [
    # names
    ("uppercase-name-override", ("--set", "nameOverride=Day0"), "at '/nameOverride': 'Day0' does not match"),
    ("fullname-override-digit", ("--set", "fullnameOverride=9lives"), "at '/fullnameOverride': '9lives'"),
    ("fullname-override-long", ("--set", f"fullnameOverride={'a' * 41}"), "at '/fullnameOverride'"),
    ("secret-name-uppercase", ("--set", "webhook.secret.existingSecret=HF"), "at '/webhook/secret/existingSecret'"),
    ("store-secret-underscore", ("--set", "store.existingSecret=s3_keys"), "at '/store/existingSecret'"),
    ("pull-secret-uppercase", ("--set", "imagePullSecrets[0].name=RegCred"), "at '/imagePullSecrets/0/name'"),
    (
        "ingress-host-dots",
        ("--set", "webhook.ingress.enabled=true,webhook.ingress.host=a..b"),
        "'/webhook/ingress/host'",
    ),
    # image
    ("image-repository-uppercase", ("--set", "image.repository=Day0"), "at '/image/repository': 'Day0'"),
    ("image-tag-space", ("--set", "image.tag=v1 rc"), "at '/image/tag': 'v1 rc'"),
    # tolerations
    (
        "toleration-exists-with-value",
        tolerations("worker.tolerations", {"key": "gpu", "operator": "Exists", "value": "true"}),
        "at '/worker/tolerations/0/value': value must be ''",
    ),
    (
        "toleration-no-key-equal",
        tolerations("webhook.tolerations", {"operator": "Equal", "value": "x"}),
        "at '/webhook/tolerations/0/operator': value must be 'Exists'",
    ),
    (
        "toleration-seconds-not-noexecute",
        tolerations("prefectServer.tolerations", {"key": "k", "effect": "NoSchedule", "tolerationSeconds": 30}),
        "at '/prefectServer/tolerations/0/effect': value must be 'NoExecute'",
    ),
    (
        "toleration-lowercase-effect",
        tolerations("workPool.jobDefaults.tolerations", {"key": "k", "operator": "Exists", "effect": "noschedule"}),
        "at '/workPool/jobDefaults/tolerations/0/effect'",
    ),
    (
        "toleration-bad-key",
        tolerations("worker.tolerations", {"key": "not a key", "operator": "Exists"}),
        "at '/worker/tolerations/0/key'",
    ),
    (
        "pool-toleration-seconds",  # day0.spec.Toleration has no tolerationSeconds: refused at run time
        tolerations("clusterSpec.nodePools.gpu-elastic.tolerations", {"key": "k", "tolerationSeconds": 3}),
        "additional properties 'tolerationSeconds' not allowed",
    ),
    # resources
    (
        "requests-above-limits-cpu",
        ("--set", "worker.resources.requests.cpu=2"),
        "worker.resources: the request of cpu (2) is above its limit (1)",
    ),
    (
        "requests-above-limits-memory",
        ("--set", "prefectServer.resources.requests.memory=3Gi"),
        "prefectServer.resources: the request of memory (3Gi) is above its limit (2Gi)",
    ),
    (
        "requests-above-limits-millicores",
        ("--set", "testResources.requests.cpu=0.25"),
        "testResources: the request of cpu (0.25) is above its limit (200m)",
    ),
    (
        "job-defaults-request-above-limit",
        ("--set", "workPool.jobDefaults.memoryRequest=5Gi"),
        "workPool.jobDefaults: the request of memory (5Gi) is above its limit (4Gi)",
    ),
    ("negative-quantity", ("--set", "webhook.resources.requests.cpu=-1"), "at '/webhook/resources/requests/cpu'"),
    ("quantity-typo", ("--set", "webhook.resources.limits.memory=1GB"), "at '/webhook/resources/limits/memory'"),
    # the store
    ("file-store-no-volume", ("--set", "store.uri=file:///data/day0"), "at '/store/volume': minProperties"),
    (
        "file-store-no-volume-writable-root",  # the container's own filesystem: lost with the pod, seen by no other
        (*WRITABLE_ROOT, "--set", "store.uri=file:///data/day0"),
        "at '/store/volume': minProperties",
    ),
    (
        "file-store-two-receivers",
        (*STORE_VOLUME, "--set", "store.uri=file:///data/day0,webhook.replicas=2"),
        "at '/store/uri': 'file:///data/day0' does not match pattern '^s3://'",
    ),
    ("s3-bucket-uppercase", ("--set", "store.uri=s3://Day0/runs"), "at '/store/uri': 's3://Day0/runs'"),
    # the schedule the worker's init container registers
    ("cron-word", ("--set", "regression.cron=nightly"), "at '/regression/cron': 'nightly'"),
    ("cron-minute-range", ("--set", "regression.cron=61 * * * *"), "at '/regression/cron': '61 * * * *'"),
    ("cron-weekday-range", ("--set", "regression.cron=0 2 * * 8"), "at '/regression/cron': '0 2 * * 8'"),
    ("cron-zero-step", ("--set", "regression.cron=*/0 * * * *"), "at '/regression/cron'"),
    ("timezone-lowercase", ("--set", "regression.timezone=utc"), "at '/regression/timezone': 'utc'"),
    ("timezone-offset", ("--set", "regression.timezone=+02:00"), "at '/regression/timezone'"),
    # podEnv, as day0.spec.PodEnvVar and the downward API take it
    (
        "pod-env-value-and-field",
        pod_env({"name": "A", "value": "x", "field_path": "status.podIP"}),
        "at '/clusterSpec/podEnv/0': 'oneOf' failed",
    ),
    ("pod-env-no-source", pod_env({"name": "A"}), "at '/clusterSpec/podEnv/0': 'oneOf' failed, none matched"),
    (
        "pod-env-bad-field",
        pod_env({"name": "A", "field_path": "status.podIp"}),
        "at '/clusterSpec/podEnv/0/field_path': 'status.podIp'",
    ),
    ("pod-env-kuberay-name", pod_env({"name": "RAY_ADDRESS", "value": "x"}), "at '/clusterSpec/podEnv/0/name'"),
    ("pod-env-bad-name", pod_env({"name": "MY-VAR", "value": "x"}), "at '/clusterSpec/podEnv/0/name': 'MY-VAR'"),
    (
        "pod-env-duplicate",
        pod_env({"name": "MY_POD_IP", "field_path": "status.podIP"}, {"name": "MY_POD_IP", "value": "x"}),
        "clusterSpec.podEnv[1]: MY_POD_IP is already set by clusterSpec.podEnv[0]",
    ),
    # security contexts: typos and what the chart's posture forbids
    (
        "pod-security-typo",
        ("--set", "podSecurityContext.runAsUSer=0"),
        "at '/podSecurityContext': additional properties 'runAsUSer' not allowed",
    ),
    (
        "container-security-typo",
        ("--set", "containerSecurityContext.readOnlyRootFileSystem=false"),
        "at '/containerSecurityContext': additional properties 'readOnlyRootFileSystem' not allowed",
    ),
    (
        "seccomp-typo",
        ("--set", "podSecurityContext.seccompProfile.typ=Localhost"),
        "at '/podSecurityContext/seccompProfile': additional properties 'typ' not allowed",
    ),
    (
        "seccomp-localhost-without-profile",
        ("--set", "containerSecurityContext.seccompProfile.type=Localhost"),
        "at '/containerSecurityContext/seccompProfile': missing property 'localhostProfile'",
    ),
    (
        "capabilities-typo",
        ("--set", "containerSecurityContext.capabilities.drops[0]=ALL"),
        "at '/containerSecurityContext/capabilities': additional properties 'drops' not allowed",
    ),
    ("capabilities-added", ("--set", "containerSecurityContext.capabilities.add[0]=NET_ADMIN"), "capabilities/add'"),
    ("root-user", ("--set", "podSecurityContext.runAsUser=0"), "at '/podSecurityContext/runAsUser'"),
    (
        "selinux-spc-t",  # super-privileged: no SELinux confinement at all
        ("--set", "podSecurityContext.seLinuxOptions.type=spc_t"),
        "at '/podSecurityContext/seLinuxOptions/type': 'not' failed",
    ),
    (
        "container-selinux-unconfined",
        ("--set", "containerSecurityContext.seLinuxOptions.type=unconfined_t"),
        "at '/containerSecurityContext/seLinuxOptions/type'",
    ),
    # secrets never in values (stored in the release, shown by `helm get values`, copied into every pod spec)
    ("pod-env-plain-token", pod_env({"name": "HF_TOKEN", "value": "hf_abc"}), "at '/clusterSpec/podEnv/0/value'"),
    (
        "pod-env-plain-secret-key",
        pod_env({"name": "MY_POD_IP", "field_path": "status.podIP"}, {"name": "aws_secret_access_key", "value": "x"}),
        "at '/clusterSpec/podEnv/1/value'",
    ),
    (
        "job-env-plain-password",
        ("--set-json", 'workPool.jobDefaults.env={"DB_PASSWORD": "hunter2"}'),
        "invalid propertyName 'DB_PASSWORD'",
    ),
    # where the checkout is, and where runs go
    ("workdir-root", ("--set", "image.workdir=/"), "at '/image/workdir': '/' does not match"),
    ("workdir-double-slash", ("--set", "image.workdir=//"), "at '/image/workdir'"),
    ("runs-in-kube-system", ("--set", "runs.namespace=kube-system"), "at '/runs/namespace': 'not' failed"),
    ("runs-in-kube-public", ("--set", "runs.namespace=kube-public"), "at '/runs/namespace'"),
    ("runs-in-kube-node-lease", ("--set", "runs.namespace=kube-node-lease"), "at '/runs/namespace'"),
    ("runs-in-default", ("--set", "runs.namespace=default"), "at '/runs/namespace'"),
    # the chart's Prefect server never runs without API authentication
    ("prefect-server-open", ("--set", "prefect.authSecret.name="), "at '/prefect/authSecret/name': minLength"),
    # labels the API server refuses on a pod (nodeSelector)
    (
        "node-selector-bad-value",
        ("--set-json", 'workPool.jobDefaults.nodeSelector={"day0.io/pool": "gpu fixed"}'),
        "at '/workPool/jobDefaults/nodeSelector/day0.io~1pool'",
    ),
    (
        "pool-node-selector-bad-key",
        ("--set-json", 'clusterSpec.nodePools.gpu-fixed.node_selector={"pool name": "a"}'),
        "invalid propertyName 'pool name'",
    ),
    # counts and ports
    ("negative-replicas", ("--set", "worker.replicas=-1"), "at '/worker/replicas'"),
    ("zero-worker-replicas", ("--set", "worker.replicas=0"), "at '/worker/replicas': minimum: got 0, want 1"),
    ("zero-webhook-replicas", ("--set", "webhook.replicas=0"), "at '/webhook/replicas': minimum: got 0, want 1"),
    ("service-port-zero", ("--set", "webhook.service.port=0"), "at '/webhook/service/port'"),
]


@pytest.mark.parametrize(("args", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_values_are_refused_naming_the_value(args: tuple[str, ...], message: str) -> None:
    assert message in refused(*args)


@pytest.mark.parametrize("release", ["1st", "my.release"])
def test_a_release_name_that_makes_no_service_name_is_refused(release: str) -> None:
    assert f'resource name prefix "{release}-day0" (release "{release}"' in refused(release=release)
    accepted_docs = helm_template("--set", "fullnameOverride=day0-one", release=release)
    assert accepted_docs.returncode == 0, accepted_docs.stderr


@pytest.mark.parametrize("values", [None, *CI_VALUES], ids=lambda v: v.stem if v else "defaults")
def test_the_defaults_and_the_ci_values_render(values: Path | None) -> None:
    docs = accepted(*(["-f", str(values)] if values else []))
    assert {"Deployment", "ConfigMap"} <= {d["kind"] for d in docs}


def test_values_at_the_edges_are_accepted() -> None:
    """...and the cluster spec the chart renders from them is one day0.spec takes (a flow run reads it)."""
    from day0.spec.cluster import ClusterSpec

    docs = accepted(
        *STORE_VOLUME,
        "--set",
        "store.uri=file:///data/day0,nameOverride=d0,fullnameOverride=",
        "--set",
        "worker.resources.requests.cpu=1,worker.resources.requests.memory=1024Mi",  # equal to the limits
        "--set",
        "workPool.jobDefaults.cpuRequest=2000m,webhook.secret.existingSecret=hf.webhook",
        *tolerations(
            "worker.tolerations",
            {"operator": "Exists"},
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 30,
            },
            {"key": "day0.io/pool", "operator": "Equal", "value": "gpu-fixed"},
        ),
        *pod_env(
            {"name": "MY_POD_IP", "field_path": "status.podIP"},
            {"name": "POOL", "field_path": "metadata.labels['ray.io/group']"},
            {"name": "GREETING", "value": ""},
        ),
        "--set",
        "containerSecurityContext.seccompProfile.type=Localhost",
        "--set",
        "containerSecurityContext.seccompProfile.localhostProfile=profiles/day0.json",
        *tolerations("clusterSpec.head.tolerations", {"key": "day0.io/head", "operator": "Exists", "value": ""}),
        *tolerations("clusterSpec.nodePools.gpu-elastic.tolerations", {"operator": "Exists"}),
    )
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-clusters")]
    (text,) = configmap["data"].values()
    spec = ClusterSpec.model_validate(yaml.safe_load(text))
    assert [e.name for e in spec.pod_env] == ["MY_POD_IP", "POOL", "GREETING"]
    assert spec.head.tolerations[0].operator == "Exists"


# The schedule: the schema agrees with Prefect (what `prefect deploy` in the worker's init container
# runs), except six-field crons (seconds), which the chart's five-field schedule refuses.
CRONS = [
    "0 2 * * *",
    "30 3 * * 1-5",
    "*/15 * * * *",
    "0 0 1 jan,jul *",
    "0 9 * * MON-FRI",
    "0 12 L * *",
    "0 0 * * 5#3",
    "0-30/5 8-18 * * *",
    "00 09 * * 7",
    "@daily",
    "nightly",
    "* * * *",
    "61 * * * *",
    "0 24 * * *",
    "0 0 32 * *",
    "0 0 * 13 *",
    "0 0 * * 8",
    "0 0 0 * *",
    "*/0 * * * *",
    "a b c d e",
]


@pytest.mark.parametrize("cron", CRONS)
def test_the_cron_pattern_agrees_with_prefect(cron: str) -> None:
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=cron)
        prefect_ok = True
    except ValueError:
        prefect_ok = False
    done = helm_template("--set-json", f"regression.cron={json.dumps(cron)}")
    assert (done.returncode == 0) == prefect_ok, done.stderr
    if not prefect_ok:
        assert "at '/regression/cron'" in done.stderr


def test_the_timezone_pattern_accepts_every_zone_prefect_knows() -> None:
    import re
    from zoneinfo import available_timezones

    pattern = json.loads((CHART / "values.schema.json").read_text())["properties"]["regression"]["properties"]
    regex = re.compile(pattern["timezone"]["pattern"])
    assert [z for z in sorted(available_timezones()) if not regex.match(z) and z != "localtime"] == []
    accepted("--set", "regression.timezone=America/Argentina/Buenos_Aires")
