"""The adaptation flow: run a spec's steps in order, each gated on the verdicts of the steps it
reads, then write the report; the flow run fails when a step failed.

    day0 run configs/pipelines/tiny-local.yaml            # via the CLI
    python -m flows.adapt configs/pipelines/tiny-local.yaml

Works with no Prefect server configured (ephemeral) and against a real one (PREFECT_API_URL).
"""

from __future__ import annotations

import sys
import time
from typing import Any, get_type_hints

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from day0.core.result import StepResult
from day0.errors import Day0Error, RunFailed, UsageError
from day0.report import write_report
from day0.runs import RunContext, RunSummary
from day0.spec import STEPS, PipelineSpec, load_spec, spec_from_dict
from flows._gate import StepGate
from tasks.analyze import analyze
from tasks.operators import operators
from tasks.optimize import optimize
from tasks.parallel import parallel
from tasks.trial import trial

__all__ = ["TASKS", "adapt", "check_runnable", "plan_steps", "prerequisites"]

# The built steps, in pipeline order; a step's prerequisites are the results its task reads.
TASKS: dict[str, Any] = {
    "analyze": analyze,
    "operators": operators,
    "parallel": parallel,
    "optimize": optimize,
    "trial": trial,
}


def prerequisites(step: str) -> tuple[str, ...]:
    """The steps whose results `step`'s task takes, read from its typed signature."""
    hints = get_type_hints(TASKS[step].fn)
    return tuple(
        t.STEP for name, t in hints.items() if name != "return" and isinstance(t, type) and issubclass(t, StepResult)
    )


def plan_steps(spec: PipelineSpec, only: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(steps to run in pipeline order, including prerequisites; requested steps not built yet)."""
    if only and (unknown := [s for s in only if s not in STEPS]):
        raise UsageError(f"--only: unknown step(s) {unknown}; expected some of {list(STEPS)}")
    wanted = [s for s in spec.steps if not only or s in only]
    needed: set[str] = set()

    def add(step: str) -> None:
        if step in TASKS and step not in needed:
            needed.add(step)
            for dep in prerequisites(step):
                add(dep)

    for step in wanted:
        add(step)
    return [s for s in STEPS if s in needed], [s for s in wanted if s not in TASKS]


def check_runnable(spec: PipelineSpec) -> None:
    """Refuse, before anything starts, what this version of the flow cannot run."""
    if spec.cluster.backend == "kuberay":
        raise UsageError(
            "cluster.backend: 'kuberay' is not run by `day0 run` in this version (the flow would run "
            "on this machine instead); use `cluster: local`, or set cluster.address to an existing "
            "Ray cluster"
        )


@flow(name="adapt", log_prints=True)
def adapt(spec: dict[str, Any], only: list[str] | None = None, fresh: bool = False) -> dict[str, Any]:
    """Run the spec (a parsed YAML mapping). Returns the run summary (`RunSummary` as a dict);
    raises `RunFailed` (the flow run ends Failed, naming the steps) when a step failed."""
    log, start = get_run_logger(), time.perf_counter()
    pipeline_spec = spec_from_dict(spec, "spec")
    check_runnable(pipeline_spec)
    ctx = RunContext.create(pipeline_spec, flow_run_id=flow_run.get_id(), fresh=fresh)
    steps, unavailable = plan_steps(pipeline_spec, only)
    ctx.begin_attempt()
    gate = StepGate(ctx, steps)
    try:
        analyzed = gate.run(analyze, ctx)
        gate.run(operators, ctx, analyzed=analyzed)
        planned = gate.run(parallel, ctx, analyzed=analyzed)
        optimized = gate.run(optimize, ctx, analyzed=analyzed, planned=planned)
        gate.run(trial, ctx, analyzed=analyzed, planned=planned, optimized=optimized)
        for step in unavailable:
            gate.not_built(step)
    finally:  # also on SIGTERM/cancellation: the report shows what ran and what did not
        ctx.publish_manifest()
        report = write_report(ctx, time.perf_counter() - start, steps + unavailable)
        log.info("report: %s", report["html"])
    summary = RunSummary.from_manifest(ctx, steps, report)
    if gate.usage_error is not None:
        raise gate.usage_error
    if summary.failed:
        raise RunFailed(summary.failure_message(), summary.model_dump(mode="json"))
    return summary.model_dump(mode="json")


def _main(argv: list[str]) -> int:
    from pathlib import Path

    from day0.spec import load_yaml

    load_spec(argv[0])  # validate first: clear errors before Prefect starts
    try:
        print(adapt(load_yaml(Path(argv[0]))))
    except (RunFailed, Day0Error) as exc:
        print(exc, file=sys.stderr)
        return 1 if isinstance(exc, RunFailed) else 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
