"""Every registered step as a Prefect task of the same shape: its `run` inside `run_step`, so all
of a step's work is resumable and any raise is recorded as the step's failure."""

from __future__ import annotations

from prefect import Task, task
from prefect.cache_policies import NO_CACHE

from day0.core.result import StepResult
from day0.runs.context import RunContext
from day0.steps.registry import REGISTRY, SUBSTEPS, StepSpec
from tasks._step import StepProgress, run_step, step_logger

__all__ = ["SUBSTEP_TASKS", "TASKS", "step_task"]


def step_task(spec: StepSpec) -> Task[..., StepResult]:
    def run(ctx: RunContext, **results: StepResult) -> StepResult:
        progress = StepProgress(ctx, spec.name, step_logger())
        return run_step(spec, ctx, lambda: spec.run(ctx, progress, **results))

    run.__doc__ = (spec.run.__doc__ or "").strip() or f"Step {spec.name}."
    return task(name=spec.name, cache_policy=NO_CACHE)(run)


# The steps as tasks, in pipeline order.
TASKS: dict[str, Task[..., StepResult]] = {name: step_task(spec) for name, spec in REGISTRY.items()}
# The sub-steps as tasks of their own (`day0.steps.registry.SUBSTEPS`).
SUBSTEP_TASKS: dict[str, Task[..., StepResult]] = {name: step_task(sub.step) for name, sub in SUBSTEPS.items()}
