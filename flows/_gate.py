"""Running a step only when the steps it reads passed, and recording why it did not run otherwise.

A step whose task raised is recorded as failed (by `tasks._step.run_step`, or here when it raised
before reaching it) and its dependents are skipped; steps that do not read it still run. A user
error (`Day0Error`) is kept to be re-raised once the report is written, so the command line exits 2
for it. Each error is logged once (`tasks._step.OncePerError`): a user error or a failed verdict as
one line, a bug with its traceback.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from day0.core.result import StepResult
from day0.errors import Day0Error
from day0.runs.context import RunContext, StepRecord
from day0.steps.registry import SUBSTEPS, needs
from tasks._step import one_line, step_logger

if TYPE_CHECKING:
    from prefect import Task

__all__ = ["StepGate"]


class StepGate:
    def __init__(self, ctx: RunContext, steps: list[str]):
        self.ctx, self.steps = ctx, steps
        self.usage_error: Day0Error | None = None
        self._unavailable: dict[str, str] = {}  # step -> why its result is not there

    def _skip(self, step: str, reason: str) -> None:
        step_logger().warning("%s: skipped: %s", step, reason)
        self.ctx.record(
            StepRecord(
                step=step,
                status="skipped",
                started_at=dt.datetime.now(dt.UTC),
                seconds=0.0,
                verdict="skipped",
                reasons=[reason],
            )
        )
        self._unavailable[step] = "was skipped"

    def _record_raise(self, step: str, started: dt.datetime, exc: Exception) -> None:
        """A step that raised is failed, also when it raised before `run_step` could record it."""
        if any(r.step == step for r in self.ctx.attempt_records()):
            return
        seconds = (dt.datetime.now(dt.UTC) - started).total_seconds()
        self.ctx.record(
            StepRecord(step=step, status="failed", started_at=started, seconds=seconds, error=one_line(exc))
        )

    def run(
        self, task: Task[..., StepResult], ctx: RunContext, results: dict[str, StepResult | None]
    ) -> StepResult | None:
        """The step's `task` over the `results` it reads if it is planned and every result it
        requires passed (one it may read is passed only when it passed), else None."""
        step: str = task.name
        if step not in self.steps:
            return None
        required = [n.step for n in needs(step) if n.required]
        required += [name for name, sub in SUBSTEPS.items() if sub.parent == step and name in self.steps]
        blocked = [f"step {s} {self._unavailable.get(s, 'failed')}" for s in required if not _passed(results.get(s))]
        if blocked:
            self._skip(step, "needs " + ", ".join(blocked))
            return None
        given = {n.keyword: results[n.step] for n in needs(step) if _passed(results.get(n.step))}
        started = dt.datetime.now(dt.UTC)
        try:
            result: StepResult = task(ctx, **given)
        except Day0Error as exc:
            self.usage_error = self.usage_error or exc
            self._unavailable[step] = "was refused its input"
            self._record_raise(step, started, exc)
            return None
        except Exception as exc:  # noqa: BLE001 - recorded as the step's failure; the run goes on without it
            step_logger().error("%s: raised %s: %s", step, type(exc).__name__, exc)
            self._unavailable[step] = "raised an error"
            self._record_raise(step, started, exc)
            return None
        if not result.passed:
            self._unavailable[step] = f"failed ({'; '.join(result.reasons[:2])})"
        return result


def _passed(result: StepResult | None) -> bool:
    return result is not None and result.passed
