"""Step 5 as a Prefect task: trial training (reference vs candidate) with loss alignment and resume."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from day0.runs import RunContext
from day0.trial.loop import TrialFaults
from day0.trial.results import TrialResult
from day0.trial.step import plan_from_results, run_trial
from tasks._step import run_step, step_logger

__all__ = ["trial"]


def checkpoint_uri(ctx: RunContext) -> str:
    """Ray Train storage for this run's trial checkpoints, inside the artifact store."""
    return ctx.store().url(ctx.key("trial", "checkpoints"))


@task(name="trial", cache_policy=NO_CACHE)
def trial(ctx: RunContext, inputs: dict[str, BaseModel], faults: TrialFaults | None = None,
          max_failures: int = 2) -> TrialResult:
    """`inputs`: earlier results by step name; `optimize` (then `parallel`) supply recompute/sharding.
    `faults` is for tests only (injected training bugs)."""
    log = step_logger()
    plan = plan_from_results(inputs.get("optimize"), inputs.get("parallel"))
    return run_step("trial", ctx, TrialResult, lambda: run_trial(
        ctx.spec, checkpoint_uri=checkpoint_uri(ctx), plan=plan, faults=faults, max_failures=max_failures,
        progress=lambda msg: log.info("trial: %s", msg)))
