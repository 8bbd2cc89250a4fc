"""`day0 run` on the kuberay backend: the flow creates the run's RayCluster through the API, and
deletes it when the run is stopped: SIGTERM of the command, or cancellation through Prefect.

These runs use kwok's fake GPU nodes: the cluster gets Ready but its pods run no processes, so the
first job never connects and the run is stopped while it waits. Runs that execute real Ray jobs in
the pods are in tests/e2e/test_kuberay_pods.py (the pod runner).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from day0.backends.kuberay.manifest import GROUP, PLURAL, RUN_ID_LABEL, VERSION, label_value
from day0.runs import RunContext
from day0.spec import spec_from_dict

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
REPO = Path(__file__).resolve().parents[2]


def kuberay_spec(tmp_path: Path, name: str, pool: str, bucket: str) -> tuple[Path, str]:
    """A kuberay spec on the fake pool `pool` (head on the kwok `cpu` pool); returns (path, run id)."""
    raw = {
        "metadata": {"name": name},
        "model": "tiny-deepseek-v3",
        "platform": "cpu",
        "training": {"seq_len": 64, "global_batch": 4, "micro_batch": 2, "precision": {"compute": "fp32"}},
        "cluster": {
            "backend": "kuberay",
            "namespace": "day0",
            "dashboard_via": "pod-ip",
            "ready_timeout_s": 120,
            "head": {"node_selector": {"day0.io/role": "cpu"}, "cpus": 1, "memory_gib": 1},
            "node_pools": [
                {
                    "name": "accel",
                    "accelerator": {"resource": "nvidia.com/gpu", "per_node": 8, "memory_gib": 80},
                    "nodes": 2,
                    "node_selector": {"day0.io/pool": pool},
                }
            ],
        },
        "storage": f"s3://{bucket}/{name}",
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path, RunContext.create(spec_from_dict(raw)).run_id


class Run:
    """`day0 run SPEC --only operators` in its own session, its output collected as it comes."""

    def __init__(self, tmp_path: Path, spec: Path, api_url: str, api: Any, run_id: str) -> None:
        self.api, self.run_id = api, run_id
        env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(tmp_path / "prefect"), "COLUMNS": "200"}
        env.update(PYTHONUNBUFFERED="1", PREFECT_LOGGING_LEVEL="INFO")  # the test reacts to the progress lines
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "run", str(spec), "--only", "operators"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        """Never leave the run or its cluster behind, whatever the test asserted."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        from day0.backends.kuberay.lifecycle import delete_run_clusters

        delete_run_clusters("day0", self.run_id, api_client=self.api)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, what: str, check: Callable[[], bool], timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            if self.proc.poll() is not None:
                self._reader.join(5)
                raise AssertionError(f"day0 run exited ({self.proc.returncode}) before {what}:\n{self.output}")
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}:\n{self.output}")

    def finish(self, timeout_s: float = 240) -> str:
        try:
            self.proc.wait(timeout_s)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._reader.join(5)
        return self.output


def run_clusters(api: Any, run_id: str) -> list[str]:
    from kubernetes import client

    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, "day0", PLURAL, label_selector=f"{RUN_ID_LABEL}={label_value(run_id)}"
    )
    return [i["metadata"]["name"] for i in listed["items"]]


def run_pods(api: Any, run_id: str) -> list[str]:
    from kubernetes import client

    pods = client.CoreV1Api(api).list_namespaced_pod("day0", label_selector=f"{RUN_ID_LABEL}={label_value(run_id)}")
    return [p.metadata.name for p in pods.items]


@pytest.fixture
def api_url(prefect_server: None) -> str:
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


@pytest.fixture
def fake_pool(node_pools: Callable[..., str]) -> str:
    return node_pools("accel", 2)


def test_sigterm_of_day0_run_deletes_the_cluster(
    tmp_path: Path, api: Any, s3_server: Any, fake_pool: str, api_url: str
) -> None:
    spec, run_id = kuberay_spec(tmp_path, "kr-sigterm", fake_pool, s3_server.bucket)
    with Run(tmp_path, spec, api_url, api, run_id) as run:
        run.wait_for("the first job", lambda: "submitted to" in run.output)
        # sized for the planned steps: step 2 needs one accelerator worker, beside the head
        assert run_clusters(api, run_id) and len(run_pods(api, run_id)) == 2
        run.proc.send_signal(signal.SIGTERM)
        out = run.finish()
    assert run.proc.returncode != 0, out
    assert "cluster: created RayCluster" in out and "cluster: deleting RayCluster" in out, out
    assert run_clusters(api, run_id) == [] and run_pods(api, run_id) == []


def _cancel(api_url: str, name: str) -> str:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Cancelling

    async def cancel() -> str:
        async with get_client() as client:
            for run in await client.read_flow_runs(limit=50):
                if run.parameters.get("spec", {}).get("metadata", {}).get("name") == name and run.state.is_running():
                    await client.set_flow_run_state(run.id, Cancelling(), force=True)
                    return str(run.id)
        raise AssertionError(f"no running flow run of {name}")

    with temporary_settings({PREFECT_API_URL: api_url}):
        return asyncio.run(cancel())


def test_cancelling_the_flow_run_deletes_the_cluster(
    tmp_path: Path, api: Any, s3_server: Any, fake_pool: str, api_url: str
) -> None:
    spec, run_id = kuberay_spec(tmp_path, "kr-cancel", fake_pool, s3_server.bucket)
    with Run(tmp_path, spec, api_url, api, run_id) as run:
        run.wait_for("the first job", lambda: "submitted to" in run.output)
        assert run_clusters(api, run_id)
        _cancel(api_url, "kr-cancel")
        out = run.finish()
    assert "the flow run was cancelled" in out and run.proc.returncode != 0, out
    assert run_clusters(api, run_id) == [] and run_pods(api, run_id) == []
