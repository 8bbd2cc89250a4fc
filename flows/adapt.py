"""The adaptation flow: run a spec's steps in order, each gated on the verdicts of the steps it
reads, then write the report; the flow run fails when a step failed.

    day0 run configs/pipelines/tiny-local.yaml            # via the CLI
    python -m flows.adapt configs/pipelines/tiny-local.yaml
    prefect deployment run adapt/release --param spec=configs/pipelines/tiny-local.yaml

`spec` is a path (relative to the repository, or absolute) or an inline mapping (what the release
webhook sends). Every flow run publishes a link artifact to its report and the scorecard as a
Markdown artifact.

Works with no Prefect server configured (ephemeral) and against a real one (PREFECT_API_URL).
"""

from __future__ import annotations

import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.exceptions import CancelledRun, TerminationSignal
from prefect.runtime import flow_run
from prefect.states import Cancelled

from day0.backends.session import check_backend, run_backend, sweep_run
from day0.core import cancel
from day0.core.result import StepResult
from day0.core.typing import JsonObject
from day0.errors import Day0Error, RunFailed, UsageError
from day0.paths import REPO_ROOT
from day0.report.write import write_report
from day0.runs.context import NAMESPACE_PATTERN, RunContext, RunSummary
from day0.runs.folder import USER_RUNS, reserved_namespace
from day0.runs.lock import hold_run
from day0.settings import RunSettings
from day0.spec.checks import check_steps
from day0.spec.location import read_spec_document
from day0.spec.pipeline import STEPS, PipelineSpec, load_spec, spec_from_dict
from day0.steps.registry import pods_needed, prerequisites, with_substeps
from flows._artifacts import publish_report_artifacts
from flows._gate import StepGate
from flows.recovery import cancel_requested_earlier, check_attempt
from tasks.steps import SUBSTEP_TASKS, TASKS

if TYPE_CHECKING:
    from prefect import Flow
    from prefect.client.schemas.objects import FlowRun

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["adapt", "check_runnable", "plan_steps", "spec_parameter"]


def plan_steps(spec: PipelineSpec, only: list[str] | None = None) -> list[str]:
    """The steps to run in pipeline order: those wanted (`only`, else the spec's) and their prerequisites,
    with the sub-steps the spec asks for (step 3's calibration) before their parent."""
    if only and (unknown := [s for s in only if s not in STEPS]):
        raise UsageError(f"--only: unknown step(s) {unknown}; expected some of {list(STEPS)}")
    wanted = [s for s in spec.steps if not only or s in only]
    needed: set[str] = set()

    def add(step: str) -> None:
        if step not in needed:
            needed.add(step)
            for dep in prerequisites(step):
                add(dep)

    for step in wanted:
        add(step)
    return with_substeps(spec, [s for s in STEPS if s in needed])


def check_runnable(spec: PipelineSpec, steps: list[str]) -> None:
    """Refuse, before anything starts, what this spec cannot run on (its backend's preconditions) and
    what its steps would refuse as bad input (`day0.spec.checks.check_steps`, as `day0 validate` does):
    a run started from a deployment, past the CLI's preflight, refuses at once too."""
    check_backend(spec)
    check_steps(spec, steps, "spec")


@contextmanager
def _stop_when_cancelled(flow_run_id: str | None) -> Iterator[None]:
    """Turn a cancellation requested through Prefect (the run reads Cancelling or Cancelled) into the
    process's cancel (`day0.core.cancel.request`: the waits registered for it are stopped from here, a
    Ray Train fit aborted), then SIGINT (KeyboardInterrupt) in the main thread.

    Why: a worker cancels the runs it started by signalling their process, but a run started in
    this process (`day0 run`, `python -m flows.adapt`) only changes state to Cancelling. Raising
    there runs the same `finally` blocks as Ctrl-C and SIGTERM: the Ray job is stopped, the
    RayCluster deleted, the report written. The signal alone was not enough: one landing where the main
    thread does not act on it is lost, and a trial went on training to its end (issue 42 item 5)."""
    if flow_run_id is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    from prefect.client.orchestration import get_client

    done, main, poll_s = threading.Event(), threading.main_thread().ident, RunSettings().cancel_poll_s
    assert main is not None

    def watch() -> None:
        with get_client(sync_client=True) as client:
            while not done.wait(poll_s):
                try:
                    state = client.read_flow_run(UUID(flow_run_id)).state
                except Exception:  # noqa: BLE001 - the API being briefly away must not stop the run
                    continue
                # Cancelled too: a run may get there without Cancelling (Prefect's cancellation timeout, a
                # state forced through the API or the UI), and it still computes until stopped
                if state is not None and (state.is_cancelling() or state.is_cancelled()) and not done.is_set():
                    print("day0: the flow run was cancelled: stopping", file=sys.stderr)
                    cancel.request()
                    # a real signal to the main thread: it interrupts Python code and blocking calls there
                    signal.pthread_kill(main, signal.SIGINT)
                    return

    watcher = threading.Thread(target=watch, name="day0-cancel-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()


def _cancel_requested(flow_run_id: str | None) -> bool:
    """Whether the flow run reads Cancelling (or Cancelled): an interrupt then is its cancellation. A
    worker's runner stops a run it cancels with SIGTERM, which Prefect's engine records as a crash unless
    the runner's control channel told it first (with a process worker here it does not)."""
    if flow_run_id is None:
        return False
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(UUID(flow_run_id)).state
    except Exception:  # noqa: BLE001 - the API away: an interrupt, as it would be without it
        return False
    return state is not None and (state.is_cancelling() or state.is_cancelled())


def spec_parameter(spec: JsonObject | str) -> PipelineSpec:
    """The flow's `spec` parameter: an inline mapping, or a spec file's path (relative to the
    repository, so a deployment's caller need not know the worker's working directory) inside
    DAY0_RUN_SPEC_ROOTS, whose errors are counted, never quoted (`day0.spec.location`)."""
    if isinstance(spec, dict):
        return spec_from_dict(spec, "spec")
    path = Path(spec)  # data from whoever started the run: see day0.spec.location
    return read_spec_document(
        path if path.is_absolute() else REPO_ROOT / path, "spec", lambda raw: spec_from_dict(raw, spec)
    )


def _context(spec: JsonObject | str, namespace: str, flow_run_id: str | None = None, fresh: bool = False) -> RunContext:
    pipeline_spec = spec_parameter(spec)
    if not re.match(NAMESPACE_PATTERN, namespace):
        raise UsageError(f"namespace {namespace!r}: expected folder names separated by '/', none starting with '.'")
    if (reserved := reserved_namespace(namespace)) is not None:
        raise UsageError(f"namespace {namespace!r}: {reserved}/ is the store's own folder, not a place for runs")
    return RunContext.create(pipeline_spec, flow_run_id=flow_run_id, fresh=fresh, namespace=namespace)


# Any: a Prefect State, which types `name` optional; a cancelled or crashed state always has one
def _sweep_clusters(flow: Flow[P, R], flow_run: FlowRun, state: Any) -> None:
    """Cancellation/crash hook: delete the run's RayClusters (the flow's `finally` may not have run)."""
    try:
        ctx = _context(flow_run.parameters["spec"], flow_run.parameters.get("namespace", USER_RUNS))
        deleted = sweep_run(ctx.spec, ctx.run_id)
    except Exception as exc:  # noqa: BLE001 - a hook must not mask the state it reacts to
        print(f"day0: cluster sweep after {state.name} failed: {exc}", file=sys.stderr)
        return
    if deleted:
        print(f"day0: deleted RayCluster(s) {deleted} after the flow run was {state.name.lower()}")


@flow(name="adapt", log_prints=True, on_cancellation=[_sweep_clusters], on_crashed=[_sweep_clusters])
def adapt(
    spec: JsonObject | str, only: list[str] | None = None, fresh: bool = False, namespace: str = USER_RUNS
) -> JsonObject:
    """Run the spec (an inline mapping, or a spec file's path relative to the repository) in the
    store's `namespace` folder (`runs`: users' runs). Returns the run summary (`RunSummary` as a
    dict); raises `RunFailed` (the flow run ends Failed, naming the steps) when a step failed, and
    Prefect's `CancelledRun` (the run ends Cancelled) when it was cancelled through Prefect."""
    start = time.perf_counter()
    if cancel_requested_earlier(flow_run.get_id()):  # a cancel is final, even if a crash got the run rescheduled
        return cast(JsonObject, Cancelled(message="the flow run's cancellation was requested earlier: not run again"))
    check_attempt(flow_run.get_run_count())  # a crashed run is rescheduled (flows/recovery.py), within bounds
    ctx = _context(spec, namespace, flow_run_id=flow_run.get_id(), fresh=fresh)
    steps = plan_steps(ctx.spec, only)
    check_runnable(ctx.spec, steps)
    # One run per spec, a deployment run's too, taken before anything is written to the run's folder
    # (`day0 run` holds it already, from before Prefect started).
    with hold_run(ctx, reuse_held=True):
        return _run_steps(ctx, steps, start)


def _run_steps(ctx: RunContext, steps: list[str], start: float) -> JsonObject:
    """The flow's body once the run's lock is held: the steps, then the manifest and the report."""
    log, pipeline_spec = get_run_logger(), ctx.spec
    ctx.begin_attempt()
    gate = StepGate(ctx, steps)
    results: dict[str, StepResult | None] = {}
    cancel.clear()  # a run before this one in the process may have been cancelled
    try:
        pods = pods_needed(pipeline_spec, steps)
        with _stop_when_cancelled(ctx.flow_run_id), run_backend(ctx, pods, progress=log.info):
            for step in steps:  # each gated on the results its `run` reads (`day0.steps.registry`)
                cancel.raise_if_requested()  # a cancel never starts the next step, whatever became of the signal
                results[step] = gate.run(TASKS.get(step) or SUBSTEP_TASKS[step], ctx, results)
    except KeyboardInterrupt:  # Ctrl-C, our watcher's SIGINT, or a wait it stopped (`day0.core.cancel`)
        if not cancel.requested():
            raise
    except TerminationSignal:  # SIGTERM: a kill, or a worker's runner stopping a run it cancels
        if not _cancel_requested(ctx.flow_run_id):  # one API read, on this path only
            raise
        cancel.request()
    finally:  # also on SIGTERM/cancellation: the report shows what ran and what did not
        manifest = ctx.publish_manifest()
        report = write_report(ctx, time.perf_counter() - start, steps, manifest=manifest, results=results)
        log.info("report: %s", report["html"])
        publish_report_artifacts(ctx, report)
    if cancel.requested():
        # The run ends Cancelled, as a worker marks a run it stopped, not Crashed (the engine's verdict
        # on an interrupt), which the recovery automation (flows/recovery.py) would rerun.
        # Prefect takes a returned state as the run's final one and raises CancelledRun to the caller,
        # who so never receives it (hence the cast).
        return cast(JsonObject, Cancelled(message=f"cancelled through Prefect; report: {report['html']}"))
    summary = RunSummary.from_manifest(ctx, steps, report, manifest)
    if gate.usage_error is not None:
        raise gate.usage_error
    if summary.failed:
        raise RunFailed(summary.failure_message(), summary.model_dump(mode="json"))
    return summary.model_dump(mode="json")


def _main(argv: list[str]) -> int:
    from day0.spec.pipeline import load_yaml

    load_spec(argv[0])  # validate first: clear errors before Prefect starts
    try:
        print(adapt(load_yaml(Path(argv[0]))))
    except (RunFailed, Day0Error) as exc:
        print(exc, file=sys.stderr)
        return 1 if isinstance(exc, RunFailed) else 2
    except CancelledRun as exc:
        print(exc, file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
