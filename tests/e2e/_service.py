"""The installed service for the release-day drill (tests/e2e/test_release_day.py): the chart installed on
pod-runner Nodes, so its Prefect server, Kubernetes worker and webhook receiver, the worker's flow-run
Jobs and the runs' RayClusters all run as real processes; the S3 test server is the store.

What it provides: `install` / `upgrade` / `uninstall` with the drill's values, the release payload
POSTed to the receiver's Service, the flow runs read back from the chart's Prefect server, the runs
namespace's RayClusters and pods, and every pod's log tail for a failure message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from day0.core.ports import free_port
from testsupport.pod_runner import PodRunner, process_backed

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "day0"
MODEL_CONFIG = REPO / "configs" / "models" / "tiny-deepseek-v3" / "config.json"
ORG = "day0-drill"
WEBHOOK_SECRET = "s-drill-webhook-secret"
STORE_SECRET = "day0-drill-s3"
PREFECT_AUTH = "day0:s-drill-prefect-auth"  # in the chart's default prefect.authSecret, day0-prefect-auth
ACCEL = {"resource": "day0.io/accel", "per_node": 1, "memory_gib": 16}  # the planner's figure
TRIAL = {
    "scale": {"layers": 2, "hidden": 64, "experts": 4},
    "steps": 12,
    "seq_len": 32,
    "micro_batch": 2,
    "checkpoint_every": 4,
    "workers": 2,
}
RELEASE_SPEC = {
    "platform": "cpu",
    "training": {"seq_len": 64, "global_batch": 4, "micro_batch": 2, "precision": {"compute": "bf16"}},
    "validation": {"reference_dtype": "fp64", "production_elements": 1 << 20},  # see tests/fixtures/budgets.py
    "trial": TRIAL,
    "inference": {
        "quantization": "int8-weight",
        "max_batch": 2,
        "context_len": 256,
        "cache_blocks": 16,
        "benchmark": {"requests": 4, "warmup_requests": 1, "concurrency": [2], "input_len": 16, "output_len": 4},
        "slo": {"ttft_p99_ms": 60000, "tpot_p99_ms": 5000},
    },
}


def _bin(var: str, name: str) -> str:
    out = subprocess.run(
        ["bash", "-c", f"source {REPO}/k8s/env.sh && echo ${var}"], check=True, capture_output=True, text=True
    )
    return str(Path(out.stdout.strip()) / name)


def helm(*args: str) -> str:
    done = subprocess.run([_bin("HELM_BIN", "helm"), *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise AssertionError(
            f"helm {' '.join(args)} -> rc {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done.stdout


def payload(repo: str, sha: str) -> dict[str, Any]:
    """A Hugging Face `repo.content` update delivery: a new commit on main."""
    return {
        "event": {"action": "update", "scope": "repo.content"},
        "repo": {
            "type": "model",
            "name": repo,
            "id": uuid.uuid4().hex[:24],
            "private": False,
            "headSha": sha,
            "url": {"web": f"https://huggingface.co/{repo}", "api": f"https://huggingface.co/api/models/{repo}"},
            "owner": {"id": uuid.uuid4().hex[:24]},
        },
        "updatedRefs": [{"ref": "refs/heads/main", "oldSha": "0" * 40, "newSha": sha}],
        "webhook": {"id": uuid.uuid4().hex[:24], "version": 3},
    }


def hub_snapshot(hub: Path, repo: str, sha: str) -> None:
    """The commit in huggingface_hub's cache layout (config only): what the flow-run pod resolves offline."""
    snapshot = hub / f"models--{repo.replace('/', '--')}" / "snapshots" / sha
    snapshot.mkdir(parents=True, exist_ok=True)
    shutil.copy(MODEL_CONFIG, snapshot / "config.json")


@dataclass
class Service:
    api: Any
    runner: PodRunner
    prefix: str
    namespace: str
    s3: Any
    hub: Path
    release: str = "r"
    ports: dict[str, int] = field(default_factory=lambda: {k: free_port() for k in ("prefect", "webhook", "health")})

    @property
    def runs(self) -> str:
        return f"{self.namespace}-runs"

    @property
    def prefect_url(self) -> str:
        return f"http://{self.pod_ip('prefect-server', self.namespace)}:{self.ports['prefect']}/api"

    # --- values and helm ---------------------------------------------------------------------

    def values(self) -> dict[str, Any]:
        pool = lambda name: {"day0.io/pool": f"{self.prefix}-{name}"}  # noqa: E731 - a one-line lookup
        cluster = process_backed(
            {
                "head": {"node_selector": pool("head"), "cpus": 2, "memory_gib": 4},
                "node_pools": [
                    {
                        "name": name,
                        "accelerator": ACCEL,
                        "cpus_per_node": 2,
                        "memory_gib_per_node": 2,
                        "node_selector": pool("work"),
                        **size,
                    }
                    for name, size in (("fixed", {"nodes": 1}), ("elastic", {"elastic": {"min": 0, "max": 1}}))
                ],
            }
        )
        ctl = {"nodeSelector": pool("ctl")}
        return {
            "image": {"repository": "day0-drill", "tag": "test", "workdir": str(REPO)},  # the runner runs no images
            "store": {
                "uri": f"s3://{self.s3.bucket}/drill",
                "endpointUrl": self.s3.endpoint_url,
                "existingSecret": STORE_SECRET,
            },
            "prefectServer": {**ctl, "port": self.ports["prefect"]},
            "webhook": {
                **ctl,
                "port": self.ports["webhook"],
                "service": {"port": self.ports["webhook"]},  # no kube-proxy: Service port = pod port
                "secret": {"existingSecret": "day0-drill-webhook", "key": "secret"},
                "watch": {"orgs": [ORG], "patterns": []},
                "releaseSpec": RELEASE_SPEC,
            },
            "worker": {**ctl, "healthPort": self.ports["health"]},
            "workPool": {
                "jobDefaults": {
                    "nodeSelector": pool("flow"),
                    "cpuRequest": "1",
                    "memoryRequest": "2Gi",
                    "env": {"DAY0_HUB_CACHE_DIR": str(self.hub), "HF_HUB_OFFLINE": "1"},
                }
            },
            "runs": {
                "namespace": self.runs,
                "createNamespace": False,
                "maxAttempts": 3,
                "crashSettleSeconds": 10,  # Prefect's least: the rerun after the lost pod comes sooner
                "leaseSeconds": 15,  # and takes the dead attempt's lock over sooner (renewed every 5 s)
            },
            "clusterSpec": {
                "name": "drill",
                "readyTimeoutS": 300,
                "jobTimeoutS": 900,
                "head": cluster["head"],
                "rayStartParams": cluster["ray_start_params"],
                "podEnv": cluster["pod_env"],
                "nodePools": {p.pop("name"): p for p in cluster["node_pools"]},
            },
            "regression": {"enabled": False},
            "probes": {"initialDelaySeconds": 90, "periodSeconds": 10, "failureThreshold": 12},  # a loaded machine
        }

    def install(self, values_file: Path) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        for ns in (self.namespace, self.runs):  # the runs namespace is ours to create (runs.createNamespace: false)
            core.create_namespace({"metadata": {"name": ns}})
            keys = {"access-key-id": self.s3.access_key, "secret-access-key": self.s3.secret_key}
            core.create_namespaced_secret(ns, {"metadata": {"name": STORE_SECRET}, "stringData": keys})
            auth = {"metadata": {"name": "day0-prefect-auth"}, "stringData": {"auth-string": PREFECT_AUTH}}
            core.create_namespaced_secret(ns, auth)  # the server and its clients; flow-run pods in the runs namespace
        core.create_namespaced_secret(
            self.namespace, {"metadata": {"name": "day0-drill-webhook"}, "stringData": {"secret": WEBHOOK_SECRET}}
        )
        values_file.write_text(yaml.safe_dump(self.values()))
        helm(
            "install",
            self.release,
            str(CHART),
            "-n",
            self.namespace,
            "-f",
            str(values_file),
            "--wait",
            "--timeout",
            "600s",
        )

    def upgrade(self, *sets: str, strings: dict[str, str] | None = None) -> None:
        """`helm upgrade --reuse-values` with `--set` of `sets` and a JSON string value for each of `strings`."""
        args = [a for s in sets for a in ("--set", s)]
        args += [a for k, v in (strings or {}).items() for a in ("--set-json", f"{k}={json.dumps(v)}")]
        helm(
            "upgrade",
            self.release,
            str(CHART),
            "-n",
            self.namespace,
            "--reuse-values",
            *args,
            "--wait",
            "--timeout",
            "300s",
        )

    def uninstall(self) -> None:
        from kubernetes import client

        with contextlib.suppress(Exception):  # a diagnostic: what the tests' own checks missed, if anything
            if left := [rc["metadata"]["name"] for rc in self.rayclusters()]:
                runs = [(r.name, r.state_name, r.run_count) for r in self.flow_runs()]
                print(f"RayClusters in {self.runs} at uninstall, deleted with its namespace: {left}; flow runs: {runs}")
        subprocess.run(
            [_bin("HELM_BIN", "helm"), "uninstall", self.release, "-n", self.namespace, "--wait", "--timeout", "180s"],
            capture_output=True,
            timeout=300,
        )
        core = client.CoreV1Api(self.api)
        for ns in (self.runs, self.namespace):
            try:
                core.delete_namespace(ns)
            except client.exceptions.ApiException as exc:
                if exc.status != 404:
                    raise
        # Wait while the pod runner still runs: Kubernetes deletes a namespace's pods before its other objects,
        # and a pod whose node runs no kubelet any more never terminates, which would keep its RayCluster.
        self.wait("the release's namespaces to be deleted", lambda: not self._namespaces_left(core), 300)

    def _namespaces_left(self, core: Any) -> list[str]:
        from kubernetes import client

        left = []
        for ns in (self.runs, self.namespace):
            try:
                core.read_namespace(ns)
                left.append(ns)
            except client.exceptions.ApiException as exc:
                if exc.status != 404:
                    raise
        return left

    # --- pods and their addresses -------------------------------------------------------------

    def pods(self, namespace: str, selector: str = "") -> list[Any]:
        from kubernetes import client

        return list(client.CoreV1Api(self.api).list_namespaced_pod(namespace, label_selector=selector).items)

    def pod_ip(self, component: str, namespace: str) -> str:
        ready = [
            p
            for p in self.pods(namespace, f"app.kubernetes.io/component={component}")
            if p.status.pod_ip and p.metadata.deletion_timestamp is None
        ]
        assert ready, f"no {component} pod with an address in {namespace}"
        return str(ready[0].status.pod_ip)

    def post_release(self, repo: str, sha: str) -> httpx.Response:
        """POST the delivery to the receiver's Service: its selected pod's address and the Service's port (what
        the pod runner's DNS gives every pod; there is no kube-proxy)."""
        from kubernetes import client

        svc = client.CoreV1Api(self.api).read_namespaced_service(f"{self.release}-day0-webhook", self.namespace)
        selector = ",".join(f"{k}={v}" for k, v in svc.spec.selector.items())
        (pod,) = [p for p in self.pods(self.namespace, selector) if p.status.pod_ip]
        url = f"http://{pod.status.pod_ip}:{svc.spec.ports[0].port}/webhook"
        body = json.dumps(payload(repo, sha))
        return httpx.post(url, content=body, headers={"X-Webhook-Secret": WEBHOOK_SECRET}, timeout=60)

    def rayclusters(self) -> list[dict[str, Any]]:
        from kubernetes import client

        return list(
            client.CustomObjectsApi(self.api).list_namespaced_custom_object("ray.io", "v1", self.runs, "rayclusters")[
                "items"
            ]
        )

    def logs(self, lines: int = 40) -> str:
        """The tail of every container log of every pod on the runner: what a failure message shows."""
        out = []
        for ns in (self.namespace, self.runs):
            for pod in self.pods(ns):
                try:
                    folder = self.runner.pod_dir(pod.to_dict()) / "logs"
                except Exception:  # noqa: BLE001 - a pod the runner never ran (kwok's, or gone)
                    continue
                for log in sorted(folder.glob("*")) if folder.is_dir() else []:
                    tail = log.read_text(errors="replace").splitlines()[-lines:]
                    out.append(f"--- {ns}/{pod.metadata.name} {log.name}\n" + "\n".join(tail))
        return "\n".join(out)[-30000:]

    # --- Prefect ------------------------------------------------------------------------------

    def flow_runs(self, sha: str | None = None) -> list[Any]:
        """Flow runs of adapt/release on the chart's Prefect server (those pinning `sha` when given)."""
        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

        async def read() -> list[Any]:
            async with get_client() as c:
                return list(await c.read_flow_runs(limit=200))

        with temporary_settings({PREFECT_API_URL: self.prefect_url, PREFECT_API_AUTH_STRING: PREFECT_AUTH}):
            runs = asyncio.run(read())
        pinned = [r for r in runs if isinstance(r.parameters.get("spec"), dict)]
        return [r for r in pinned if sha is None or r.parameters["spec"]["model"]["source"].endswith("@" + sha)]

    def artifacts(self, flow_run_id: Any) -> list[Any]:
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
        from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

        async def read() -> list[Any]:
            async with get_client() as c:
                return list(
                    await c.read_artifacts(
                        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
                    )
                )

        with temporary_settings({PREFECT_API_URL: self.prefect_url, PREFECT_API_AUTH_STRING: PREFECT_AUTH}):
            return asyncio.run(read())

    def wait(self, what: str, check: Any, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if value := check():
                    return value
            except Exception:  # noqa: BLE001 - the API briefly away (a pod restarting): ask again
                pass
            time.sleep(2)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{self.logs()}")
