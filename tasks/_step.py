"""The shared step runner: resume from the store, persist results atomically, publish artifacts.

A step's folder holds `code.json` (the digest of the code computing it, written when it starts),
its files and `result.md`, then `result.json`, written last: its presence with a matching digest is
what makes the step complete. A folder left by other code (or any folder under `--fresh`) is
cleared before the step runs, so neither a stale result nor a stale checkpoint is reused.

Importing this module also sets how Prefect's engines log errors (`OncePerError`): one line for an
expected error, one traceback for an unexpected one.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
import traceback
from collections.abc import Callable
from typing import Literal, TypeAlias, cast
from uuid import UUID

from prefect import get_run_logger
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.context import FlowRunContext, TaskRunContext
from prefect.exceptions import CancelledRun, MissingContextError

import day0
from day0.core.result import StepResult, progress_fraction
from day0.errors import CorruptRecord, Day0Error, RunFailed
from day0.provenance import code_digest
from day0.runs.context import RunContext, StepRecord
from day0.steps.registry import StepSpec

__all__ = [
    "EXPECTED_ERRORS",
    "OncePerError",
    "StepProgress",
    "in_prefect_run",
    "install_log_policy",
    "one_line",
    "run_step",
    "step_logger",
]

# Errors a user can act on (bad input, a failed verdict), and a cancellation: their message is the whole
# story. A cancelled deployment run's process ends raising CancelledRun, which Prefect's engine logged
# as 40 lines of "exited with unexpected exception" traceback in the worker's log.
EXPECTED_ERRORS: tuple[type[Exception], ...] = (Day0Error, RunFailed, CancelledRun)
# Where Prefect's task engine, flow engine and flow-run process (`python -m prefect.engine`) log.
ENGINE_LOGGERS = ("prefect.task_runs", "prefect.flow_runs", "prefect.engine")
_LOGGED = "_day0_logged"
# Prefect's run logger (an adapter) inside a run, the `day0` logger outside one.
StepLogger: TypeAlias = logging.Logger | logging.LoggerAdapter[logging.Logger]


def one_line(exc: BaseException) -> str:
    """`Type: message`, its whitespace (newlines included) collapsed: one log line."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


class OncePerError(logging.Filter):
    """Log each exception once: an expected one as one line (naming the task run's step), an
    unexpected one with its traceback.

    Why: Prefect logs a run's exception with its traceback where the task fails ("Task run failed
    with exception"), again where the flow fails ("Encountered exception during execution") and,
    in a deployment's flow-run process, a third time as it exits ("Engine execution exited with
    unexpected exception"). Returning a `Failed` state instead of raising does not avoid them:
    a task that does is logged with `exc_info` anyway, and the flow-run process re-raises a failed
    flow's state to log it. Records below ERROR (Prefect's DEBUG "Crash details") are left alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or record.levelno < logging.ERROR:
            return True
        if getattr(exc, _LOGGED, False):
            return False  # logged already: where the task failed, or where the flow did
        try:
            setattr(exc, _LOGGED, True)
        except AttributeError:  # an exception type without attributes: log it, as Prefect does
            return True
        if isinstance(exc, EXPECTED_ERRORS):
            step = getattr(record, "task_name", None)
            record.msg, record.args = "%s%s", (f"{step}: " if step else "", one_line(exc))
            record.exc_info, record.exc_text = None, None
        return True


def install_log_policy() -> None:
    """Put `OncePerError` on Prefect's engine loggers (once): done when this module is imported, so
    in every process that runs a day0 task or flow, before anything can fail."""
    for name in ENGINE_LOGGERS:
        engine_logger = logging.getLogger(name)
        if not any(isinstance(f, OncePerError) for f in engine_logger.filters):
            engine_logger.addFilter(OncePerError())


install_log_policy()


def step_logger() -> StepLogger:
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("day0")


def in_prefect_run() -> bool:
    """Inside a flow or task run (not `task.fn` called bare from a test): artifacts can be published."""
    return bool(FlowRunContext.get() or TaskRunContext.get())


class StepProgress:
    """A step's progress callback: each line logged as `<step>: <line>`; a line that says how far the
    step is (`step N/M`: the trial's step, loss, tokens/s and ETA) also sets the step's Prefect progress
    artifact (created on the first such line, updated on the next), so the run's page shows how far it
    is. Called from the trial's relay thread too, in the task's context."""

    def __init__(self, ctx: RunContext, step: str, log: StepLogger) -> None:
        self.step, self.log = step, log
        self.key = f"{ctx.spec.metadata.name}-{step}-progress".lower()
        self.artifact: UUID | None = None

    def __call__(self, line: str) -> None:
        self.log.info("%s: %s", self.step, line)
        fraction = progress_fraction(line)
        if fraction is None or not in_prefect_run():
            return
        try:
            if self.artifact is None:
                # called from sync code, it returns the id (its type also allows the coroutine of an async caller)
                created = create_progress_artifact(progress=100 * fraction, key=self.key, description=line)
                self.artifact = cast(UUID, created)
            else:
                update_progress_artifact(self.artifact, progress=100 * fraction, description=line)
        except Exception as exc:  # noqa: BLE001 - the bar is a view: the API away must not stop the step
            self.log.warning("%s: progress artifact not updated: %s", self.step, one_line(exc))


def _marker(ctx: RunContext, step: str) -> dict[str, object] | None:
    """The step's `code.json`, None when absent; a corrupt one is named with `--fresh` as the way out."""
    store, key = ctx.store, ctx.key(step, "code.json")
    if not store.exists(key):
        return None
    try:
        marker = store.get_json(key)
    except CorruptRecord as exc:
        raise exc.with_remedy(f"run again with --fresh to recompute {step} (or delete the step's folder)") from None
    if not isinstance(marker, dict):
        raise CorruptRecord(store.url(key), "not a mapping", f"run again with --fresh to recompute {step}")
    return marker


def _reusable(ctx: RunContext, step: str, code: str, variant: str | None) -> bool:
    if ctx.fresh or not ctx.store.exists(ctx.key(step, "result.json")):  # --fresh: no marker is read
        return False
    marker = _marker(ctx, step)
    return marker is not None and marker.get("digest") == code and marker.get("variant") == variant


def _prepare(ctx: RunContext, step: str, code: str, variant: str | None, log: StepLogger) -> None:
    """Clear what other code (or an earlier attempt under --fresh) left, then claim the folder. A
    different variant alone keeps the folder: its checkpoints came from the same code."""
    store, marker = ctx.store, ctx.key(step, "code.json")
    previous = None if ctx.fresh else (_marker(ctx, step) or {}).get("digest")
    if ctx.fresh or (previous is not None and previous != code):
        removed = store.delete_prefix(ctx.key(step))
        why = "--fresh" if ctx.fresh else f"its code changed ({previous} -> {code})"
        log.info("%s: recomputing because of %s; removed %d stored file(s)", step, why, removed)
    elif previous is None and store.list(ctx.key(step) + "/"):
        store.delete_prefix(ctx.key(step))  # written by a day0 that kept no code marker
    store.put_json(
        marker,
        {
            "digest": code,
            "variant": variant,
            "day0_version": day0.__version__,
            "started_at": dt.datetime.now(dt.UTC).isoformat(),
        },
    )


def _interrupt(exc: BaseException) -> BaseException | None:
    """The interrupt (KeyboardInterrupt, Prefect's TerminationSignal on SIGTERM, SystemExit) behind
    `exc`: one raised by a signal handler inside Ray's Cython code comes out as `SystemError: ...
    returned a result with an exception set`, caused by it."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if not isinstance(cause, Exception):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def run_step(spec: StepSpec, ctx: RunContext, compute: Callable[[], StepResult]) -> StepResult:
    """Return the stored result of the step if this run completed it with the same code (its `run`
    module and every first-party module it imports), else compute it, store its files, `result.md`
    and (last) `result.json`, and publish its artifacts. The step's `variant` names what else shaped
    the result besides the code and the spec."""
    log, store, step, result_type = step_logger(), ctx.store, spec.name, spec.result
    code = code_digest(spec.run.__module__)
    variant = spec.variant()
    if variant:  # a fault drill: such a result is never reused by a clean run, nor the reverse
        variant = hashlib.sha256(variant.encode()).hexdigest()[:12]
    key = ctx.key(step, "result.json")
    started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()

    def record(
        status: Literal["executed", "cached", "failed", "interrupted"],
        result: StepResult | None = None,
        error: str | None = None,
    ) -> None:
        ctx.record(
            StepRecord(
                step=step,
                status=status,
                started_at=started,
                seconds=time.perf_counter() - t0,
                verdict=result.verdict if result else None,
                reasons=result.reasons if result else [],
                code=code,
                error=error,
            )
        )

    if _reusable(ctx, step, code, variant):
        try:
            result = store.get_model(key, result_type)
        except CorruptRecord as exc:
            raise exc.with_remedy(f"run again with --fresh to recompute {step} (or delete the file)") from None
        log.info(
            "%s: completed earlier by the same code (%s), reusing %s: %s", step, code, store.url(key), result.verdict
        )
        record("cached", result)
        return result
    _prepare(ctx, step, code, variant, log)
    log.info("%s: running", step)
    ctx.step_started(step, started)  # killed from here on (even by kill -9), the step reads as interrupted
    try:
        result = compute()
        for name, data in result.files().items():
            store.put_bytes(ctx.key(step, name), data)
        markdown = result.to_markdown()
        store.put_text(ctx.key(step, "result.md"), markdown, "text/markdown")
        store.put_json(key, result.model_dump(mode="json"))
    except Exception as exc:
        if (interrupt := _interrupt(exc)) is None:
            record("failed", error="".join(traceback.format_exception_only(exc)).strip())
            raise
        record("interrupted", error=f"interrupted ({type(interrupt).__name__}) after {time.perf_counter() - t0:.1f} s")
        raise interrupt  # noqa: B904 - stop the flow, as the interrupt would have; its cause is `exc`
    except BaseException as exc:  # SIGTERM or Ctrl-C (KeyboardInterrupt), SystemExit: stopped, not failed
        record("interrupted", error=f"interrupted ({type(exc).__name__}) after {time.perf_counter() - t0:.1f} s")
        raise
    record("executed", result)
    log.info("%s: %s in %.1f s -> %s", step, result.verdict, time.perf_counter() - t0, store.url(key))
    for reason in result.reasons:
        log.info("%s: %s", step, reason)
    if in_prefect_run():
        create_markdown_artifact(
            markdown=markdown,
            key=f"{ctx.spec.metadata.name}-{step}".lower(),
            description=f"day0 {step}: {result.verdict}",
        )
        if rows := result.artifact_table():
            create_table_artifact(
                table=rows, key=f"{ctx.spec.metadata.name}-{step}-table".lower(), description=f"day0 {step}: per item"
            )
    return result
