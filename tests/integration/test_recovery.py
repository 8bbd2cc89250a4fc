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
