"""`day0 run` on the kuberay backend: the flow creates the run's RayCluster through the API, and
deletes it when the run is stopped: SIGTERM of the command, or cancellation through Prefect.

These runs use kwok's fake GPU nodes: the cluster gets Ready but its pods run no processes, so the
first job never connects and the run is stopped while it waits. Runs that execute real Ray jobs in
the pods are in tests/e2e/test_kuberay_pods.py (the pod runner).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import yaml

from day0.backends.kuberay.manifest import GROUP, PLURAL, RUN_ID_LABEL, VERSION, label_value
from day0.runs.context import RunContext
from day0.spec.pipeline import spec_from_dict
from tests.e2e._day0_run import Day0Run
from tests.fixtures.budgets import small_production_checks

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


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
    raw = small_production_checks(raw)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path, RunContext.create(spec_from_dict(raw)).run_id


def run_clusters(api: Any, run_id: str) -> list[str]:
    from kubernetes import client

    listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, "day0", PLURAL, label_selector=f"{RUN_ID_LABEL}={label_value(run_id)}"
    )
    return [i["metadata"]["name"] for i in listed["items"]]


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
    with Day0Run(spec, "operators", api_url=api_url, api=api, run_id=run_id, home=tmp_path / "prefect") as run:
        run.wait_for("the first job", lambda: "submitted to" in run.output)
        # sized for the planned steps: step 2 needs one accelerator worker, beside the head
        assert run_clusters(api, run_id) and len(run.pods()) == 2
        run.proc.send_signal(signal.SIGTERM)
        run.finish()
        out = run.output
    assert run.proc.returncode != 0, out
    assert "cluster: created RayCluster" in out and "cluster: deleting RayCluster" in out, out
    assert run_clusters(api, run_id) == [] and run.pods() == []


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


def _state(api_url: str, flow_run_id: str) -> Any:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        return client.read_flow_run(UUID(flow_run_id)).state


def test_cancelling_the_flow_run_deletes_the_cluster(
    tmp_path: Path, api: Any, s3_server: Any, fake_pool: str, api_url: str
) -> None:
    spec, run_id = kuberay_spec(tmp_path, "kr-cancel", fake_pool, s3_server.bucket)
    with Day0Run(spec, "operators", api_url=api_url, api=api, run_id=run_id, home=tmp_path / "prefect") as run:
        run.wait_for("the first job", lambda: "submitted to" in run.output)
        assert run_clusters(api, run_id)
        flow_run_id = _cancel(api_url, "kr-cancel")
        run.finish()
        out = run.output
    assert "the flow run was cancelled" in out and run.proc.returncode == 130, out
    assert run_clusters(api, run_id) == [] and run.pods() == []
    assert _state(api_url, flow_run_id).is_cancelled()  # not Crashed, which the recovery automation reruns
