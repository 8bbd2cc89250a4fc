"""Step 4 alone, given step 3's report: it tunes the knobs of step 3's best plan and never its degrees,
writes the plan the trial applies, and is skipped, naming step 3's reason, when step 3 found none."""

from __future__ import annotations

import dataclasses
from functools import cache

import yaml

from day0.model.structure import ModelStructure
from day0.spec.pipeline import load_spec
from day0.steps.optimize.plan import optimize_for_spec
from day0.steps.optimize.result import OptimizationReport
from day0.steps.parallel.plan import plan_for_spec
from day0.steps.parallel.result import PlanReport
from day0.steps.registry import REGISTRY
from tests.fixtures import paths

DATA = paths.DATA / "planner"
SPEC = DATA / "qwen3-30b-a3b-64-h100-elastic.yaml"


@cache
def _structure(name: str) -> ModelStructure:
    return ModelStructure.model_validate_json((DATA / f"{name}.structure.json").read_text())


@cache
def _planned() -> PlanReport:
    return plan_for_spec(load_spec(SPEC), _structure("qwen3-30b-a3b"))


def test_step_4_keeps_step_3s_degrees_and_writes_the_plan_the_trial_applies() -> None:
    planned = _planned()
    assert planned.best is not None, planned.message
    optimized = optimize_for_spec(load_spec(SPEC), _structure("qwen3-30b-a3b"), planned)
    assert isinstance(optimized, OptimizationReport) and REGISTRY["optimize"].result is OptimizationReport
    assert optimized.plan is not None and optimized.plan.parallel == planned.best.parallel
    assert optimized.plan.layers_per_stage == planned.best.layers_per_stage
    assert optimized.judge().verdict == "pass", optimized.judge().reasons
    assert optimized.memory_after_bytes <= optimized.plan.memory.capacity_bytes
    written = yaml.safe_load(optimized.files()["optimized-plan.yaml"])["parallel"]
    degrees = dataclasses.asdict(planned.best.parallel)
    assert written.items() >= degrees.items(), f"optimized-plan.yaml's degrees {written} are not step 3's {degrees}"


def test_without_a_plan_from_step_3_step_4_is_skipped_naming_why() -> None:
    none_found = _planned().model_copy(update={"plans": [], "message": "no plan fits 64 accelerators (a test's)"})
    skipped = optimize_for_spec(load_spec(SPEC), _structure("qwen3-30b-a3b"), none_found)
    judged = skipped.judge()
    assert skipped.plan is None and judged.verdict == "skipped"
    assert any("no plan fits 64 accelerators (a test's)" in r for r in judged.reasons), judged.reasons
    assert yaml.safe_load(skipped.files()["optimized-plan.yaml"])["feasible"] is False
