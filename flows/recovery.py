"""A flow run whose process died is rerun by itself: a Prefect automation, and the bound on it.

    python -m flows.recovery     # create or update the automation on the server at PREFECT_API_URL

Why an automation: when a flow-run pod dies (its node lost, OOM-killed, evicted) the flow's process
dies with it, so Prefect's flow `retries` (a loop inside that process) never run; and a Job retry
(`backoffLimit`) would start a pod whose `prefect flow-run execute` is refused, since the run still
reads Running and may not go back to Pending. prefect-kubernetes' observer marks the run Crashed once
its Job has failed; this automation reacts to `prefect.flow-run.Crashed` of any run tagged `day0` (the
deployments in prefect.yaml and the Helm chart carry the tag) and moves it to Scheduled
("AwaitingRetry"). The worker then submits the same flow run again as a new Job: the same spec and run
id, so the rerun sweeps the dead attempt's RayCluster by run id, reuses the completed steps and resumes
the trial from its last checkpoint. A run started from the CLI (`day0 run`) has no deployment, so
Prefect refuses to reschedule it: there the CLI's own resume applies.

One crash, one reschedule: a dead process is reported Crashed twice. A process worker's runner reports
it on the exit code, runs the flow's on_crashed hooks in the worker (importing the flow: seconds to tens of
seconds for flows.adapt), and the worker then reports it again; on Kubernetes the observer reports it too.
A report that lands on the Crashed run is refused (it is already terminal), but one that lands after the
reschedule crashed the rescheduled run again (Scheduled may go to Crashed): it was rescheduled twice, and
two attempts of one flow run ran at once. So the automation reschedules `DAY0_RUN_CRASH_SETTLE_S` after
the crash (a proactive trigger: armed by the Crashed event, it fires when nothing moved the run on within
that time), when every report of one death has landed on the Crashed run.

The loop is bounded outside the flow body too: a second automation counts the reschedules of each flow run
(its AwaitingRetry states) and the `DAY0_RUN_MAX_ATTEMPTS`-th one ends the run Failed, named
AttemptsExhausted, so a run that dies before its flow starts (an image that cannot be pulled, a pod killed
while importing torch; its run count never rises) stops there instead of being rescheduled forever. An
attempt that does start and is past the bound fails at once too (`check_attempt`); a Failed run triggers
nothing.

A cancel is final: a run whose cancellation was requested and that then crashed (its process killed
before it could end Cancelled) is rescheduled by the first automation, which cannot tell; a third one,
armed by the run's Cancelling event, puts any reschedule of it back to Cancelled at once, and an attempt
that a worker took in between ends Cancelled before it does anything (`cancel_requested_earlier`).

A run whose process died with nothing left to report it (a process worker's machine lost: the worker
and its flow-run processes all gone) read Running for ever. A flow run's engine sends a heartbeat
event every `PREFECT_FLOWS_HEARTBEAT_FREQUENCY` seconds (Prefect's default: 180); a fourth automation,
Prefect's "detect zombie flows" pattern, marks a `day0` run Crashed when no heartbeat nor final state
followed its last heartbeat within `ZOMBIE_BEATS` of those periods, and the first automation reruns it.
"""

from __future__ import annotations

import datetime as dt
import sys

from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification

from day0.errors import UsageError
from day0.settings import RunSettings

__all__ = [
    "AUTOMATION_NAME",
    "BOUND_NAME",
    "CANCEL_WINS_NAME",
    "TAG",
    "ZOMBIE_NAME",
    "attempts_bound_automation",
    "cancel_requested_earlier",
    "cancel_wins_automation",
    "check_attempt",
    "ensure_recovery",
    "recovery_automation",
    "zombie_automation",
]

AUTOMATION_NAME = "day0-rerun-crashed-flow-runs"
BOUND_NAME = "day0-stop-rerunning-after-max-attempts"
TAG = "day0"  # on every deployment of prefect.yaml and of the chart's work pool
BOUND_WINDOW = dt.timedelta(days=7)  # the reschedules of one flow run are counted over this long
CANCEL_WINS_NAME = "day0-keep-cancelled-flow-runs-cancelled"
ZOMBIE_NAME = "day0-crash-flow-runs-without-heartbeat"
ZOMBIE_BEATS = 2.5  # heartbeats missed before a run is taken for dead (one late beat is not a death)
FINAL_EVENTS = {f"prefect.flow-run.{s}" for s in ("Completed", "Failed", "Cancelled", "Crashed")}
# A crashed run that reaches one of these was moved on by someone else (a person, another automation)
MOVED_ON_EVENTS = {
    f"prefect.flow-run.{s}"
    for s in ("Scheduled", "AwaitingRetry", "Pending", "Running", "Completed", "Failed", "Cancelling", "Cancelled")
}


def recovery_automation(settle_s: float) -> AutomationCore:
    """The automation: a Crashed flow run tagged `day0` that nothing moved on within `settle_s` goes to
    Scheduled, named AwaitingRetry."""
    return AutomationCore(
        name=AUTOMATION_NAME,
        description="day0: reschedule a flow run whose process died (flows/recovery.py); the flow bounds the attempts.",
        enabled=True,
        trigger=EventTrigger(
            after={"prefect.flow-run.Crashed"},
            expect=MOVED_ON_EVENTS,
            match=ResourceSpecification({"prefect.resource.id": "prefect.flow-run.*"}),
            match_related=ResourceSpecification({"prefect.resource.id": f"prefect.tag.{TAG}"}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=dt.timedelta(seconds=settle_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.SCHEDULED,
                name="AwaitingRetry",
                message="rescheduled by day0's recovery automation after the flow run crashed",
            )
        ],
    )


def attempts_bound_automation(max_attempts: int) -> AutomationCore:
    """The bound: the `max_attempts`-th reschedule of a flow run tagged `day0` ends it Failed instead."""
    return AutomationCore(
        name=BOUND_NAME,
        description="day0: a flow run rescheduled after its last allowed attempt fails (flows/recovery.py).",
        enabled=True,
        trigger=EventTrigger(
            expect={"prefect.flow-run.AwaitingRetry"},
            match_related=ResourceSpecification({"prefect.resource.id": f"prefect.tag.{TAG}"}),
            for_each={"prefect.resource.id"},
            posture=Posture.Reactive,
            threshold=max_attempts,
            within=BOUND_WINDOW,
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.FAILED,
                name="AttemptsExhausted",
                message=(
                    f"day0: the flow run crashed {max_attempts} times (DAY0_RUN_MAX_ATTEMPTS={max_attempts}): "
                    "not rerun again; see the attempts' logs"
                ),
            )
        ],
    )


def cancel_wins_automation() -> AutomationCore:
    """A reschedule of a `day0` flow run that read Cancelling or Cancelled before goes to Cancelled."""
    return AutomationCore(
        name=CANCEL_WINS_NAME,
        description="day0: a flow run whose cancellation was requested is never rerun (flows/recovery.py).",
        enabled=True,
        trigger=EventTrigger(
            after={"prefect.flow-run.Cancelling", "prefect.flow-run.Cancelled"},
            expect={"prefect.flow-run.AwaitingRetry"},
            match_related=ResourceSpecification({"prefect.resource.id": f"prefect.tag.{TAG}"}),
            for_each={"prefect.resource.id"},
            posture=Posture.Reactive,
            threshold=1,
            within=BOUND_WINDOW,
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CANCELLED,
                message="day0: the flow run's cancellation was requested before it crashed: not rerun",
            )
        ],
    )


def zombie_automation(heartbeat_s: int) -> AutomationCore:
    """A `day0` flow run Running with no heartbeat for `ZOMBIE_BEATS` x `heartbeat_s` goes to Crashed."""
    silent_s = round(ZOMBIE_BEATS * heartbeat_s)
    return AutomationCore(
        name=ZOMBIE_NAME,
        description="day0: a flow run whose heartbeats stopped is marked Crashed (flows/recovery.py).",
        enabled=True,
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={"prefect.flow-run.heartbeat", *FINAL_EVENTS},
            match=ResourceSpecification({"prefect.resource.id": "prefect.flow-run.*"}),
            match_related=ResourceSpecification({"prefect.resource.id": f"prefect.tag.{TAG}"}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=dt.timedelta(seconds=silent_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=(
                    f"day0: no heartbeat from the flow run for {silent_s} s (PREFECT_FLOWS_HEARTBEAT_FREQUENCY="
                    f"{heartbeat_s}): its process and its worker are gone"
                ),
            )
        ],
    )


def _automations() -> list[AutomationCore]:
    from prefect.settings import get_current_settings

    heartbeat_s = get_current_settings().flows.heartbeat_frequency or 180  # None: Prefect sends no heartbeat
    settings = RunSettings()
    return [
        recovery_automation(settings.crash_settle_s),
        attempts_bound_automation(settings.max_attempts),
        cancel_wins_automation(),
        zombie_automation(heartbeat_s),
    ]


def ensure_recovery() -> list[str]:
    """Create the automations, or update those of their names (idempotent: one each per server); their ids."""
    from prefect.client.orchestration import get_client

    ids = []
    with get_client(sync_client=True) as client:
        for wanted in _automations():
            found = client.read_automations_by_name(wanted.name)
            if not found:
                ids.append(str(client.create_automation(wanted)))
                continue
            keep, *extra = found
            for duplicate in extra:  # two workers that started at once: keep one, or each crash reschedules twice
                client.delete_automation(duplicate.id)
            client.update_automation(keep.id, wanted)
            ids.append(str(keep.id))
    return ids


def check_attempt(run_count: int) -> None:
    """Refuse an attempt past `DAY0_RUN_MAX_ATTEMPTS` (`run_count`: Prefect's count of starts of this run)."""
    most = RunSettings().max_attempts
    if run_count > most:
        raise UsageError(
            f"flow run attempt {run_count}: the run already started {run_count - 1} times and crashed each time; "
            f"giving up (DAY0_RUN_MAX_ATTEMPTS={most}); see the earlier attempts' logs"
        )


def cancel_requested_earlier(flow_run_id: str | None) -> bool:
    """Whether the flow run ever read Cancelling or Cancelled: an attempt of it now (rerun after a crash
    that the cancel caused, or rescheduled by hand) must not compute anything. None: no Prefect run."""
    if flow_run_id is None:
        return False
    from uuid import UUID

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        states = client.read_flow_run_states(UUID(flow_run_id))
    return any(s.is_cancelling() or s.is_cancelled() for s in states)


if __name__ == "__main__":
    for automation, automation_id in zip(_automations(), ensure_recovery(), strict=True):
        print(f"automation {automation.name}: {automation_id}")
    sys.exit(0)
