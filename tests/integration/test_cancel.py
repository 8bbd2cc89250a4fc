"""Cancel is final (issue 42 item 5, issue 44 item 1): real Prefect server, real `day0 run`, real trial."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cli.reaper import TOKEN_ENV, carriers
from tests.integration.test_reaper import _attempts, _left_after, _listing, _start_run, _token_of, _wait_for

pytestmark = pytest.mark.integration


def _running_run(client, store: str):  # type: ignore[no-untyped-def]
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType

    running = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING])))
    (run,) = [
        r
        for r in client.read_flow_runs(flow_run_filter=running)
        if isinstance(spec := r.parameters.get("spec"), dict) and spec["storage"] == store
    ]
    return run


def _deaf_to_sigint() -> None:
    # Python keeps an ignored SIGINT ignored: the watcher's interrupt is lost, as it was mid-trial in 3 cancels
    # of 4 (issue 42 item 5); the cancel must stop the run without it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_for_first_step(client, cli: subprocess.Popen[str], timeout_s: float = 300) -> None:  # type: ignore[no-untyped-def]
    """Until the trial said its first step: its Prefect progress artifact is created then (`StepProgress`)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    first = ArtifactFilter(key=ArtifactFilterKey(any_=["killed-trial-progress"]))
    deadline = time.monotonic() + timeout_s
    while not client.read_artifacts(artifact_filter=first) and cli.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert client.read_artifacts(artifact_filter=first), f"the trial never said its first step (exit {cli.poll()})"


def test_day0_run_marked_cancelled_mid_trial_stops_within_seconds(tmp_path: Path, prefect_server: None) -> None:
    """A flow run can go to Cancelled without Cancelling (Prefect's cancellation timeout, a state forced
    through the API or the UI): the run's watcher reacted to Cancelling only, and the trial ran to its end.
    Then its interrupt was lost in the trial: the cancel now aborts the trial's fit itself."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL
    from prefect.states import Cancelled

    api = str(PREFECT_API_URL.value())
    cli = _start_run(tmp_path, preexec_fn=_deaf_to_sigint, PREFECT_API_URL=api)
    with get_client(sync_client=True) as client:
        _wait_for_first_step(client, cli)  # on its Ray Train workers
        before = _wait_for(cli, ("raylet", "RayTrainWorker"))
        token = _token_of(next(pid for pid, cmd in before.items() if "gcs_server" in cmd))
        run = _running_run(client, f"file://{tmp_path}/store")
        t0 = time.monotonic()
        client.set_flow_run_state(run.id, Cancelled(message="marked cancelled"), force=True)
        try:
            rc = cli.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                "still running 60 s after the cancel:\n" + (tmp_path / "cli.log").read_text()[-3000:]
            ) from None
        finally:
            cli.kill()
        took = time.monotonic() - t0
        states = [(s.type.value, s.name) for s in client.read_flow_run_states(run.id)]
    print(f"stopped {took:.1f} s after the cancel; states {states}")
    log = (tmp_path / "cli.log").read_text()
    assert rc == 130, f"exit {rc}, expected 130:\n{log[-3000:]}"
    assert states[-1][0] == "CANCELLED", states
    left = _left_after(before, token)
    assert not left, "still running after the cancelled run ended:\n" + _listing(left)
    (attempt,) = _attempts(tmp_path)
    assert (attempt[-1]["step"], attempt[-1]["status"]) == ("trial", "interrupted"), attempt


_SIGTERM_IN_RAY_START = """
import os, signal, sys, threading, time
import ray
from day0.backends.local.ray import connect

def on_term(signum, frame):  # `day0 run`'s handler (cli.main): an interrupt, exit 130
    raise KeyboardInterrupt

def sigterm_once_ray_took_over():  # the start-up window: Ray's own SIGTERM handler is installed
    while signal.getsignal(signal.SIGTERM) is on_term:
        time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGTERM)

signal.signal(signal.SIGTERM, on_term)
threading.Thread(target=sigterm_once_ray_took_over, daemon=True).start()
try:
    connect(num_cpus=1)
except KeyboardInterrupt:
    sys.exit(130)
sys.exit(3)  # started: the SIGTERM was lost
"""


def test_sigterm_while_ray_starts_reaches_the_callers_handler(tmp_path: Path) -> None:
    """Ray's handler turned a SIGTERM during `ray.init` into SystemExit 15: `day0 run` exited 15, and a
    deployment run cancelled then ended Crashed, which the recovery automation reran."""
    token = uuid.uuid4().hex  # carried by every process Ray starts for it
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", TOKEN_ENV: token}
    done = subprocess.run(
        [sys.executable, "-c", _SIGTERM_IN_RAY_START], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 130, f"exit {done.returncode}:\n{done.stderr[-3000:]}"
    deadline = time.monotonic() + 20
    while carriers(token) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not carriers(token), "Ray's processes outlived the interrupted start"


def test_an_attempt_of_a_run_whose_cancel_was_requested_ends_cancelled_before_anything(
    tmp_path: Path, prefect_server: None
) -> None:
    """Issue 44: a cancel that reached a run as a crash got it rescheduled, and the rerun computed on (twice it
    ended Completed after writing 10-15 files). The attempt now reads the run's history first."""
    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow
    from prefect.states import Cancelling, Crashed, Running, Scheduled

    from flows.adapt import adapt

    store = tmp_path / "store"
    spec = {
        "metadata": {"name": "cancelled-once"},
        "model": "tiny-deepseek-v3",
        "platform": "cpu",
        "steps": ["analyze"],
        "storage": f"file://{store}",
    }
    with get_client(sync_client=True) as client:
        run = client.create_flow_run(adapt, parameters={"spec": spec})
        for state in (Running(), Cancelling(), Crashed(message="SystemExit: 15"), Scheduled(name="AwaitingRetry")):
            client.set_flow_run_state(run.id, state, force=True)  # the cancel, the crash, the automation's reschedule
        run = client.read_flow_run(run.id)
    final = run_flow(adapt, flow_run=run, parameters={"spec": spec}, return_type="state")
    assert final.is_cancelled() and "cancellation was requested earlier" in (final.message or ""), final
    assert not list(store.rglob("*.json")), "the attempt wrote to the store: " + str(list(store.rglob("*")))
