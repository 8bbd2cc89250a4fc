"""The step registry: what the flow runs, in pipeline order, and what each step is made of.

In the spirit of torchtitan's `ModelSpec`: one `StepSpec` per step folder (`day0/steps/<name>/`, with
`result.py` for its result model, `run.py` for its work and `job.py` where it runs as a backend job).
The flow's task list, the results a step reads (from its `run` signature), the scorecard's rows and
the accelerator pods a run needs at trial scale are all read from here.

A sub-step (`SUBSTEPS`: step 3's calibration) is part of a step that runs just before it when the spec
asks for it (`wanted`), with a step's record, folder, scorecard line and resumption; its parent is skipped
when it fails.

A step's `run(ctx, progress, **results)` takes the results it reads as typed keyword arguments:
one without a default must have passed for the step to run; one defaulting to None is passed only
when its step ran and passed (step 5 trains with step 2's adaptations when there are some).
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, get_type_hints

from day0.backends.jobs import StepJob
from day0.calibration.run import CalibrationReport
from day0.core.result import StepResult
from day0.spec.pipeline import PipelineSpec
from day0.steps.analyze import run as analyze
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.inference import job as inference_job
from day0.steps.inference import run as inference
from day0.steps.inference.result import InferenceResult
from day0.steps.operators import job as operators_job
from day0.steps.operators import run as operators
from day0.steps.operators.result import OperatorsResult
from day0.steps.optimize import run as optimize
from day0.steps.optimize.result import OptimizationReport
from day0.steps.parallel import run as parallel
from day0.steps.parallel.result import PlanReport
from day0.steps.trial import job as trial_job
from day0.steps.trial import run as trial
from day0.steps.trial.result import TrialResult

__all__ = [
    "REGISTRY",
    "SUBSTEPS",
    "Need",
    "StepSpec",
    "SubStep",
    "needs",
    "pods_needed",
    "prerequisites",
    "scorecard",
    "step_spec",
    "with_substeps",
]


def _no_pods(spec: PipelineSpec) -> int:
    return 0


def _no_variant() -> str | None:
    return None


@dataclass(frozen=True)
class StepSpec:
    name: str  # a `Step`, or a sub-step's name
    result: type[StepResult]
    run: Callable[..., StepResult]  # run.py's `run(ctx, progress, **results it reads)`
    scorecard_row: str  # the report's scorecard row this step's verdict counts in
    # where it runs as a backend job (None: in the flow's process), over the step's own request and result
    job: StepJob[Any, Any] | None = None  # Any: models, which differ per step (StepJob is invariant in them)
    pods: Callable[[PipelineSpec], int] = _no_pods  # accelerator worker pods it needs at trial scale
    variant: Callable[[], str | None] = _no_variant  # what else shapes its result (a fault drill)


REGISTRY: dict[str, StepSpec] = {
    s.name: s
    for s in (
        StepSpec("analyze", AnalyzeResult, analyze.run, "numerical (steps 1-2)"),
        StepSpec("operators", OperatorsResult, operators.run, "numerical (steps 1-2)", operators_job.JOB, lambda _: 1),
        StepSpec("parallel", PlanReport, parallel.run, "plan (steps 3-4)"),
        StepSpec("optimize", OptimizationReport, optimize.run, "plan (steps 3-4)"),
        StepSpec(
            "trial",
            TrialResult,
            trial.run,
            "convergence (step 5)",
            trial_job.JOB,
            lambda spec: spec.trial.workers,
            trial.drill,
        ),
        StepSpec("inference", InferenceResult, inference.run, "application (step 6)", inference_job.JOB),
    )
}


@dataclass(frozen=True)
class SubStep:
    step: StepSpec  # its name, result and `run(ctx, progress)`; its scorecard row is its parent's
    parent: str  # the step it is part of, which it runs just before
    wanted: Callable[[PipelineSpec], bool]  # whether the spec asks for it


SUBSTEPS: dict[str, SubStep] = {
    "calibrate": SubStep(
        StepSpec("calibrate", CalibrationReport, parallel.calibrate, REGISTRY["parallel"].scorecard_row),
        "parallel",
        lambda spec: spec.planner.calibrate,
    ),
}


def step_spec(name: str) -> StepSpec:
    """The step or sub-step called `name`."""
    return REGISTRY[name] if name in REGISTRY else SUBSTEPS[name].step


def with_substeps(spec: PipelineSpec, steps: list[str]) -> list[str]:
    """`steps` with the sub-steps `spec` asks for, each just before its parent."""
    out = []
    for step in steps:
        out += [name for name, sub in SUBSTEPS.items() if sub.parent == step and sub.wanted(spec)]
        out.append(step)
    return out


class Need(NamedTuple):
    """A result a step reads: its keyword, the step that makes it, and whether it must have passed."""

    keyword: str
    step: str
    required: bool


def needs(step: str) -> tuple[Need, ...]:
    """The results `step`'s `run` reads, from its typed signature (after `ctx` and `progress`)."""
    run = step_spec(step).run
    hints, found = get_type_hints(run), []
    for name, param in inspect.signature(run).parameters.items():
        hint = hints.get(name)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            hint = next((a for a in typing.get_args(hint) if a is not type(None)), None)
        if isinstance(hint, type) and issubclass(hint, StepResult):
            found.append(Need(name, hint.STEP, param.default is inspect.Parameter.empty))
    return tuple(found)


def prerequisites(step: str) -> tuple[str, ...]:
    """The steps whose results `step` requires: planned with it when it is selected (one it only
    may read runs when the spec or `--only` selects it)."""
    return tuple(n.step for n in needs(step) if n.required)


def pods_needed(spec: PipelineSpec, steps: list[str]) -> int:
    """Accelerator worker pods the planned steps need at trial scale (at least one; step 3's
    full-scale plan is reported, not launched)."""
    return max([1, *(step_spec(s).pods(spec) for s in steps)])


def scorecard(substeps: bool = False) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(row, the steps behind it), rows in pipeline order; with `substeps`, each sub-step before its parent."""
    rows: dict[str, list[str]] = {}
    for s in REGISTRY.values():
        row = rows.setdefault(s.scorecard_row, [])
        row += [name for name, sub in SUBSTEPS.items() if substeps and sub.parent == s.name]
        row.append(s.name)
    return tuple((row, tuple(steps)) for row, steps in rows.items())
