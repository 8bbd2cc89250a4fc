"""A process worker's run whose worker and processes all died is ended (issue 44 item 1: it read Running for
420 s and counting): the flow run's heartbeats stop, flows/recovery.py's zombie automation marks it Crashed,
and the recovery automation reschedules it. A real server, `make deploy`, a real worker killed with its tree."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from uuid import UUID

import pytest

from tests.fixtures.paths import REPO
from tests.fixtures.processes import descendants
from tests.fixtures.trial import long_trial_spec

pytestmark = pytest.mark.integration
HEARTBEAT_S = 30  # Prefect's least


def _prefect(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(REPO / ".venv/bin/prefect"), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_a_run_whose_worker_and_processes_died_is_crashed_and_rescheduled(prefect_server: None, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL
    from prefect.states import Cancelled

    env = {
        **os.environ,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        "PREFECT_HOME": str(tmp_path / "home"),
        "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S),  # read by `make deploy`'s automation and the run
        "DAY0_RUN_CRASH_SETTLE_S": "10",  # Prefect's least: the reschedule follows the crash sooner
    }
    deploy = subprocess.run(
        ["make", "-o", ".venv/.installed", "deploy"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
    spec = long_trial_spec("zombie", f"file://{tmp_path}/store")
    started = _prefect(env, "deployment", "run", "adapt/release", "--params", json.dumps({"spec": spec}))
    flow_run_id = UUID(re.search(r"UUID: ([0-9a-f-]{36})", started)[1])  # type: ignore[index]
    worker = subprocess.Popen(
        [str(REPO / ".venv/bin/prefect"), "worker", "start", "--pool", "day0-local", "--run-once"],
        cwd=REPO,
        env=env,
        stdout=(tmp_path / "worker.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    with get_client(sync_client=True) as client:
        try:
            deadline = time.monotonic() + 300
            while not client.read_flow_run(flow_run_id).state.is_running() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert client.read_flow_run(flow_run_id).state.is_running(), (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(2)  # its first heartbeat, sent as the flow starts
            tree = descendants(worker.pid)
            for pid in [worker.pid, *tree]:  # the machine lost: nothing of the run is left to report it
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            worker.wait()
            killed = time.monotonic()
            deadline = killed + 3 * HEARTBEAT_S + 60
            states = []
            while time.monotonic() < deadline:
                states = client.read_flow_run_states(flow_run_id)
                if any(s.name == "AwaitingRetry" for s in states):
                    break
                time.sleep(1)
            print(f"ended {time.monotonic() - killed:.0f} s after the kill: {[s.name for s in states]}")
            crashed = [s for s in states if s.is_crashed()]
            assert crashed and "no heartbeat" in crashed[-1].message, [(s.name, s.message) for s in states]
            assert states[-1].name == "AwaitingRetry", [(s.name, s.message) for s in states]
        finally:
            client.set_flow_run_state(flow_run_id, Cancelled(message="test over"), force=True)  # no later worker
            worker.kill()
