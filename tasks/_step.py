"""The shared step runner: resume from the store, persist results atomically, publish artifacts.

A step's folder holds `code.json` (the digest of the code computing it, written when it starts),
its files and `result.md`, then `result.json`, written last: its presence with a matching digest is
what makes the step complete. A folder left by other code (or any folder under `--fresh`) is
cleared before the step runs, so neither a stale result nor a stale checkpoint is reused.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import time
import traceback
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.context import FlowRunContext, TaskRunContext
from prefect.exceptions import MissingContextError

import day0
from day0.core.result import StepResult
from day0.provenance import code_digest
from day0.runs import RunContext, StepRecord

__all__ = ["in_prefect_run", "run_step", "step_logger"]

R = TypeVar("R", bound=StepResult)


def step_logger() -> logging.Logger | logging.LoggerAdapter[Any]:
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("day0")


def in_prefect_run() -> bool:
    """Inside a flow or task run (not `task.fn` called bare from a test): artifacts can be published."""
    return bool(FlowRunContext.get() or TaskRunContext.get())


def _reusable(ctx: RunContext, step: str, code: str, variant: str | None) -> bool:
    store = ctx.store()
    if ctx.fresh or not store.exists(ctx.key(step, "result.json")) or not store.exists(ctx.key(step, "code.json")):
        return False
    marker = store.get_json(ctx.key(step, "code.json"))
    return bool(marker.get("digest") == code and marker.get("variant") == variant)


def _prepare(
    ctx: RunContext, step: str, code: str, variant: str | None, log: logging.Logger | logging.LoggerAdapter[Any]
) -> None:
    """Clear what other code (or an earlier attempt under --fresh) left, then claim the folder. A
    different variant alone keeps the folder: its checkpoints came from the same code."""
    store, marker = ctx.store(), ctx.key(step, "code.json")
    previous = store.get_json(marker).get("digest") if store.exists(marker) else None
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


def run_step(
    step: str, ctx: RunContext, result_type: type[R], compute: Callable[[], R], variant: str | None = None
) -> R:
    """Return the stored result of `step` if this run completed it with the same code, else
    compute it, store its files, `result.md` and (last) `result.json`, and publish its artifact.
    `variant` names what else shaped the result besides the code and the spec."""
    log, store = step_logger(), ctx.store()
    code = code_digest(f"tasks.{step}")
    if variant:  # e.g. injected test faults: such a result is never reused by a clean run, nor the reverse
        variant = hashlib.sha256(variant.encode()).hexdigest()[:12]
    key = ctx.key(step, "result.json")
    started, t0 = dt.datetime.now(dt.UTC), time.perf_counter()

    def record(
        status: Literal["executed", "cached", "failed"], result: StepResult | None = None, error: str | None = None
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
        result = result_type.model_validate(store.get_json(key))
        log.info(
            "%s: completed earlier by the same code (%s), reusing %s: %s", step, code, store.url(key), result.verdict
        )
        record("cached", result)
        return result
    _prepare(ctx, step, code, variant, log)
    log.info("%s: running", step)
    try:
        result = compute()
    except Exception as exc:
        record("failed", error="".join(traceback.format_exception_only(exc)).strip())
        raise
    for name, data in result.files().items():
        store.put_bytes(ctx.key(step, name), data)
    markdown = result.to_markdown()
    store.put_text(ctx.key(step, "result.md"), markdown, "text/markdown")
    store.put_json(key, result.model_dump(mode="json"))
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
    return result
