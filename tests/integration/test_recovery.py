"""flows/recovery.py against a real Prefect server (the test harness runs Prefect's triggers and actions
services): one automation however often it is registered, a Crashed run of a `day0`-tagged deployment
rescheduled by it (and nothing else), and the flows' bound on the attempts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from day0.errors import UsageError
from flows.recovery import AUTOMATION_NAME, check_attempt, ensure_recovery


def _flow_run(client, tags: list[str]):  # type: ignore[no-untyped-def]  # Prefect's sync client and its models
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.flows import Flow

    pool = f"recovery-{uuid.uuid4().hex[:6]}"
    client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    flow_id = client.create_flow(Flow(fn=lambda: None, name=f"recovery-{uuid.uuid4().hex[:6]}"))
    deployment = client.create_deployment(flow_id=flow_id, name="d", tags=tags, work_pool_name=pool)
    return client.create_flow_run_from_deployment(deployment)  # the server gives it the deployment's tags


@pytest.fixture
def prefect(prefect_server: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    from prefect.client.orchestration import get_client

    monkeypatch.setenv("DAY0_RUN_CRASH_SETTLE_S", "10")  # Prefect's least; then the triggers service's next pass (5 s)

    with get_client(sync_client=True) as client:
        yield client


def _crash(client, run) -> None:  # type: ignore[no-untyped-def]
    """What the observer does to a run whose Job failed: Running, then Crashed."""
    from prefect.states import Crashed, Running

    client.set_flow_run_state(run.id, Running(), force=True)
    client.set_flow_run_state(run.id, Crashed(message="Kubernetes job was deleted"), force=True)


def _state_after(client, run_id, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = client.read_flow_run(run_id).state
        if not state.is_crashed():
            return state
        time.sleep(0.5)
    return client.read_flow_run(run_id).state


def test_registering_twice_keeps_one_automation(prefect) -> None:  # type: ignore[no-untyped-def]
    first = ensure_recovery()
    assert ensure_recovery() == first
    (automation,) = prefect.read_automations_by_name(AUTOMATION_NAME)
    assert automation.enabled and automation.trigger.after == {"prefect.flow-run.Crashed"}
    (action,) = automation.actions
    assert (action.type, action.state.value, action.name) == ("change-flow-run-state", "SCHEDULED", "AwaitingRetry")


def test_a_crashed_day0_run_is_rescheduled_and_an_untagged_one_is_left_alone(prefect) -> None:  # type: ignore[no-untyped-def]
    ensure_recovery()
    ours, other = _flow_run(prefect, ["day0", "adapt"]), _flow_run(prefect, ["someone-else"])
    _crash(prefect, other)  # first: the trigger service, which takes events in order, has judged it
    _crash(prefect, ours)  # by the time it reschedules this one
    state = _state_after(prefect, ours.id)
    assert state.is_scheduled() and state.name == "AwaitingRetry", state
    assert prefect.read_flow_run(other.id).state.is_crashed()


def test_the_flows_refuse_an_attempt_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAY0_RUN_MAX_ATTEMPTS", "2")
    check_attempt(1)
    check_attempt(2)
    with pytest.raises(UsageError, match=r"attempt 3: the run already started 2 times.*DAY0_RUN_MAX_ATTEMPTS=2"):
        check_attempt(3)
    monkeypatch.setenv("DAY0_RUN_MAX_ATTEMPTS", "0")
    with pytest.raises(UsageError, match="DAY0_RUN_MAX_ATTEMPTS"):
        check_attempt(1)


def _reschedules(client, run_id) -> int:  # type: ignore[no-untyped-def]
    return sum(s.name == "AwaitingRetry" for s in client.read_flow_run_states(run_id))


def _judged(client) -> None:  # type: ignore[no-untyped-def]
    """Return once the trigger service, which takes events in order, has judged every event sent so far:
    a sentinel day0 run crashed now is rescheduled after them."""
    sentinel = _flow_run(client, ["day0"])
    _crash(client, sentinel)
    assert _state_after(client, sentinel.id).is_scheduled()


def test_a_run_that_never_starts_stops_after_max_attempts_with_a_clear_state(
    prefect, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Issue 44: a run whose pod dies before the flow body starts (its run count never rises) was rescheduled
    for ever, 48 times in 252 s: the bound was checked inside the flow."""
    from prefect.states import Crashed, Pending

    monkeypatch.setenv("DAY0_RUN_MAX_ATTEMPTS", "2")
    ensure_recovery()
    run = _flow_run(prefect, ["day0"])
    for attempt in (1, 2):
        prefect.set_flow_run_state(run.id, Pending(), force=True)  # submitted; its pod never runs the flow
        prefect.set_flow_run_state(run.id, Crashed(message="Kubernetes job failed: ErrImagePull"), force=True)
        _until(lambda n=attempt: _reschedules(prefect, run.id) == n)
    state = _until(lambda: (s := prefect.read_flow_run(run.id).state).is_failed() and s)
    assert state.name == "AttemptsExhausted" and "crashed 2 times (DAY0_RUN_MAX_ATTEMPTS=2)" in state.message, state
    assert _reschedules(prefect, run.id) == 2


def _until(check, timeout_s: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not (found := check()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert found, "not within the deadline"
    return found


def test_a_run_whose_cancel_was_requested_is_not_rerun_after_it_crashed(prefect) -> None:  # type: ignore[no-untyped-def]
    """Issue 44: a cancel that reached the run as a crash (Ray's SIGTERM handler: SystemExit 15) got it
    rescheduled, and the rerun completed."""
    from prefect.states import Cancelling, Crashed, Running

    ensure_recovery()
    run = _flow_run(prefect, ["day0"])
    prefect.set_flow_run_state(run.id, Running(), force=True)
    prefect.set_flow_run_state(run.id, Cancelling())  # `prefect flow-run cancel`
    prefect.set_flow_run_state(run.id, Crashed(message="Execution was aborted by SystemExit 15"), force=True)
    state = _until(lambda: (s := prefect.read_flow_run(run.id).state).is_cancelled() and s)
    assert "cancellation was requested before it crashed" in state.message, state


HOOK_S = 5  # the flow's crash hooks in the worker, between its two reports (flows.adapt: its import, here 5-30 s);
# over the 3 s of the per-run-count dedupe that came before, under the settle time (10 s here)
_CRASHY = """
import os, pathlib, time
from prefect import flow

def sweep(flow, flow_run, state):  # stands for adapt's _sweep_clusters (flows.adapt imported, RayClusters swept)
    time.sleep(float(os.environ["HOOK_S"]))

@flow(on_crashed=[sweep])
def crashy():
    pathlib.Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
    time.sleep(600)
"""


def test_one_kill_of_a_process_worker_run_reschedules_it_once(prefect, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 44: `kill -9` of a deployment run's process was reported Crashed twice and rescheduled twice. A
    process worker reports it twice: its runner on the exit code, then, after the flow's on_crashed hooks ran
    in the worker (flows.adapt's import alone takes seconds), the worker itself. A report that lands after the
    reschedule crashes the rescheduled run again; one that lands on the Crashed run is refused."""
    import os
    import signal
    import subprocess
    import sys

    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.flows import Flow
    from prefect.settings import PREFECT_API_URL
    from prefect.states import Cancelled

    ensure_recovery()
    (tmp_path / "crashy.py").write_text(_CRASHY)
    pool = f"kill-{uuid.uuid4().hex[:6]}"
    prefect.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    deployment_id = Flow.from_source(str(tmp_path), "crashy.py:crashy").deploy(  # type: ignore[attr-defined]
        "d", work_pool_name=pool, tags=["day0"], print_next_steps=False, build=False, push=False
    )
    run = prefect.create_flow_run_from_deployment(deployment_id)
    pid_file = tmp_path / "flow.pid"
    env = {
        **os.environ,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        "PID_FILE": str(pid_file),
        "HOOK_S": str(HOOK_S),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--run-once"],
        env=env,
        stdout=(tmp_path / "worker.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists():
            assert time.monotonic() < deadline and worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.2)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        worker.wait(120)  # --run-once: it exits once it has reported the run
        _judged(prefect)
        states = prefect.read_flow_run_states(run.id)
        assert _reschedules(prefect, run.id) == 1, [(s.name, s.message) for s in states]
    finally:
        prefect.set_flow_run_state(run.id, Cancelled(message="test over"), force=True)
        worker.kill()
