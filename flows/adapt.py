"""The adaptation flow: run a spec's steps in order, resuming completed ones, then write the report.

    day0 run configs/pipelines/tiny-local.yaml            # via the CLI
    python -m flows.adapt configs/pipelines/tiny-local.yaml

Works with no Prefect server configured (ephemeral) and against a real one (PREFECT_API_URL).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from pydantic import BaseModel

from day0.errors import UsageError
from day0.report import write_report
from day0.runs import RunContext
from day0.spec import STEPS, PipelineSpec, load_spec, spec_from_dict
from tasks.analyze import analyze
from tasks.operators import operators
from tasks.optimize import optimize
from tasks.parallel import parallel
from tasks.trial import trial

__all__ = ["PIPELINE", "adapt", "plan_steps"]

# step -> (task, the steps whose results it reads). Steps not listed are not built yet.
PIPELINE: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "analyze": (analyze, ()),
    "operators": (operators, ("analyze",)),
    "parallel": (parallel, ("analyze",)),
    "optimize": (optimize, ("analyze", "parallel")),
    "trial": (trial, ("optimize", "parallel")),
}


def plan_steps(spec: PipelineSpec, only: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(steps to run in pipeline order, including prerequisites; requested steps not available)."""
    wanted = [s for s in spec.steps if not only or s in only]
    if only and (unknown := [s for s in only if s not in STEPS]):
        raise UsageError(f"--only: unknown step(s) {unknown}; expected some of {list(STEPS)}")
    unavailable = [s for s in wanted if s not in PIPELINE]
    needed: set[str] = set()

    def add(step: str) -> None:
        if step in PIPELINE and step not in needed:
            needed.add(step)
            for dep in PIPELINE[step][1]:
                add(dep)

    for step in wanted:
        add(step)
    return [s for s in STEPS if s in needed], unavailable


@flow(name="adapt", log_prints=True)
def adapt(spec: dict[str, Any], only: list[str] | None = None) -> dict[str, Any]:
    """Run the spec (a parsed YAML mapping); returns the run id, step statuses and report URLs."""
    log = get_run_logger()
    pipeline_spec = spec_from_dict(spec, "spec")
    ctx = RunContext.create(pipeline_spec, flow_run_id=flow_run.get_id())
    steps, unavailable = plan_steps(pipeline_spec, only)
    for step in unavailable:
        log.warning("step %s is requested but not available in this version of day0; skipped", step)
    ctx.begin_attempt()
    results: dict[str, BaseModel] = {}
    for step in steps:
        task, deps = PIPELINE[step]
        results[step] = task(ctx, {d: results[d] for d in deps})
    notes = [f"step `{s}` requested but not available in this version" for s in unavailable]
    report = write_report(ctx, steps, notes)
    log.info("report: %s", report["html"])
    manifest = ctx.load_manifest()
    return {"run_id": ctx.run_id, "prefix": ctx.prefix, "steps": steps, "executed": manifest.executed(),
            "report": report}


if __name__ == "__main__":
    from day0.spec import load_yaml
    from pathlib import Path

    load_spec(sys.argv[1])  # validate first: clear errors before Prefect starts
    print(adapt(load_yaml(Path(sys.argv[1]))))
