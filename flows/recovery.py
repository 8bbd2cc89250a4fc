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

The loop is bounded in the flows (`check_attempt`): an attempt past `DAY0_RUN_MAX_ATTEMPTS` fails at
once, with a reason, and a Failed run triggers nothing.
"""

from __future__ import annotations

import sys

from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification

from day0.errors import UsageError
from day0.settings import RunSettings

__all__ = ["AUTOMATION_NAME", "TAG", "check_attempt", "ensure_recovery", "recovery_automation"]

AUTOMATION_NAME = "day0-rerun-crashed-flow-runs"
TAG = "day0"  # on every deployment of prefect.yaml and of the chart's work pool


def recovery_automation() -> AutomationCore:
    """The automation: a Crashed flow run tagged `day0` goes to Scheduled, named AwaitingRetry."""
    return AutomationCore(
        name=AUTOMATION_NAME,
        description="day0: reschedule a flow run whose process died (flows/recovery.py); the flow bounds the attempts.",
        enabled=True,
        trigger=EventTrigger(
            expect={"prefect.flow-run.Crashed"},
            match_related=ResourceSpecification({"prefect.resource.id": f"prefect.tag.{TAG}"}),
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.SCHEDULED,
                name="AwaitingRetry",
                message="rescheduled by day0's recovery automation after the flow run crashed",
            )
        ],
    )


def ensure_recovery() -> str:
    """Create the automation, or update the one of that name (idempotent: one per server); its id."""
    from prefect.client.orchestration import get_client

    wanted = recovery_automation()
    with get_client(sync_client=True) as client:
        found = client.read_automations_by_name(AUTOMATION_NAME)
        if not found:
            return str(client.create_automation(wanted))
        keep, *extra = found
        for duplicate in extra:  # two workers that started at once: keep one, or each crash reschedules twice
            client.delete_automation(duplicate.id)
        client.update_automation(keep.id, wanted)
        return str(keep.id)


def check_attempt(run_count: int) -> None:
    """Refuse an attempt past `DAY0_RUN_MAX_ATTEMPTS` (`run_count`: Prefect's count of starts of this run)."""
    most = RunSettings().max_attempts
    if run_count > most:
        raise UsageError(
            f"flow run attempt {run_count}: the run already started {run_count - 1} times and crashed each time; "
            f"giving up (DAY0_RUN_MAX_ATTEMPTS={most}); see the earlier attempts' logs"
        )


if __name__ == "__main__":
    print(f"automation {AUTOMATION_NAME}: {ensure_recovery()}")
    sys.exit(0)
