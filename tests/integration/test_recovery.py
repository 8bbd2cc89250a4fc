"""flows/recovery.py against a real Prefect server (the test harness runs Prefect's triggers and actions
services): one automation however often it is registered, a Crashed run of a `day0`-tagged deployment
rescheduled by it (and nothing else), and the flows' bound on the attempts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from day0.errors import UsageError
from flows.recovery import AUTOMATION_NAME, DUPLICATE_CRASH_S, check_attempt, ensure_recovery


def _flow_run(client, tags: list[str]):  # type: ignore[no-untyped-def]  # Prefect's sync client and its models
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.flows import Flow

    pool = f"recovery-{uuid.uuid4().hex[:6]}"
    client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    flow_id = client.create_flow(Flow(fn=lambda: None, name=f"recovery-{uuid.uuid4().hex[:6]}"))
    deployment = client.create_deployment(flow_id=flow_id, name="d", tags=tags, work_pool_name=pool)
    return client.create_flow_run_from_deployment(deployment)  # the server gives it the deployment's tags


@pytest.fixture
def prefect(prefect_server: None) -> Iterator[object]:
    from prefect.client.orchestration import get_client

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
    assert automation.enabled and automation.trigger.expect == {"prefect.flow-run.Crashed"}
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


def test_two_reports_of_one_crash_reschedule_the_run_once(prefect) -> None:  # type: ignore[no-untyped-def]
    """Issue 44: a dead process is reported Crashed by the worker's runner and by the worker (on Kubernetes by
    the observer too); each report was a reschedule, and two attempts of one flow run ran at once."""
    from prefect.states import Crashed

    ensure_recovery()
    run = _flow_run(prefect, ["day0"])
    _crash(prefect, run)
    prefect.set_flow_run_state(run.id, Crashed(message="Flow run infrastructure exited with non-zero status code -9"))
    _judged(prefect)
    assert _reschedules(prefect, run.id) == 1, prefect.read_flow_run_states(run.id)


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
        time.sleep(DUPLICATE_CRASH_S)  # a worker takes a rescheduled run after its poll (10 s by default)
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
