"""The shared step runner: resume from the store, persist results atomically, publish artifacts."""

from __future__ import annotations

import datetime as dt
import time
import traceback
from collections.abc import Callable
from typing import TypeVar

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.context import FlowRunContext, TaskRunContext
from prefect.exceptions import MissingContextError
from pydantic import BaseModel

from day0.runs import RunContext, StepRecord

__all__ = ["run_step", "step_logger"]

R = TypeVar("R", bound=BaseModel)  # a step result: a pydantic model with to_markdown() (and maybe files())


def step_logger():  # noqa: ANN201 - a logging.Logger or Prefect's adapter
    try:
        return get_run_logger()
    except MissingContextError:
        import logging

        return logging.getLogger("day0")


def _artifact_key(ctx: RunContext, step: str) -> str:
    return f"{ctx.spec.metadata.name}-{step}".lower()


def run_step(step: str, ctx: RunContext, result_type: type[R], compute: Callable[[], R]) -> R:
    """Return the stored result of `step` if this run completed it before, else compute and store it.

    Results may define `files() -> dict[str, bytes]` (plots, tables): stored beside result.json,
    which is written last, so a crash mid-step leaves no result that looks complete.
    """
    log, store = step_logger(), ctx.store()
    key = ctx.key(step, "result.json")
    started, t0 = dt.datetime.now(dt.timezone.utc), time.perf_counter()
    if store.exists(key):
        result = result_type.model_validate(store.get_json(key))
        log.info("%s: completed earlier, reusing %s", step, store.url(key))
        ctx.record(StepRecord(step=step, status="cached", started_at=started, seconds=time.perf_counter() - t0))
        return result
    log.info("%s: running", step)
    try:
        result = compute()
    except Exception as exc:
        ctx.record(StepRecord(step=step, status="failed", started_at=started, seconds=time.perf_counter() - t0,
                              error="".join(traceback.format_exception_only(exc)).strip()))
        raise
    for name, data in getattr(result, "files", lambda: {})().items():
        store.put_bytes(ctx.key(step, name), data)
    markdown = result.to_markdown()
    store.put_text(ctx.key(step, "result.md"), markdown, "text/markdown")
    store.put_json(key, result.model_dump(mode="json"))
    seconds = time.perf_counter() - t0
    ctx.record(StepRecord(step=step, status="executed", started_at=started, seconds=seconds))
    log.info("%s: done in %.1f s -> %s", step, seconds, store.url(key))
    if FlowRunContext.get() or TaskRunContext.get():  # outside a flow (task.fn in a test) there is no run
        create_markdown_artifact(markdown=markdown, key=_artifact_key(ctx, step), description=f"day0 {step}")
    return result
