"""prefect.yaml as `make deploy` uses it: both deployments register on a real Prefect server (the
session's), with a process work pool, the adaptation flow's entrypoint and the regression flow's
cron schedule and parameters."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.paths import REPO

pytestmark = pytest.mark.integration


def test_make_deploy_registers_both_deployments(prefect_server: None, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "PREFECT_HOME": str(tmp_path)}
    proc = subprocess.run(
        ["make", "-o", ".venv/.installed", "deploy"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    async def read() -> tuple:
        async with get_client() as client:
            pool = await client.read_work_pool("day0-local")
            release = await client.read_deployment_by_name("adapt/release")
            nightly = await client.read_deployment_by_name("regression/nightly")
            return pool, release, nightly

    pool, release, nightly = asyncio.run(read())
    assert pool.type == "process"
    assert release.entrypoint == "flows/adapt.py:adapt" and release.work_pool_name == "day0-local"
    assert "spec" in release.parameter_openapi_schema["required"]
    assert nightly.entrypoint == "flows/regression.py:regression"
    assert nightly.parameters == {"watch": "configs/regression/watch.yaml", "update_baseline": False}
    assert [s.schedule.cron for s in nightly.schedules] == ["0 2 * * *"]
    assert release.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}]
