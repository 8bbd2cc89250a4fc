"""Steps 3 and 4 as `StepResult`s: verdicts with numbers, headlines, headings and row order."""

from __future__ import annotations

import pytest

from day0.model.structure import ModelStructure
from day0.paths import CONFIGS_DIR
from day0.planner import PlanningProblem, cluster_figures, plan_parallelism
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import TrainingSpec, load_yaml
from day0.steps.optimize.result import OptimizationReport
from day0.steps.optimize.techniques import choose_optimizations
from day0.steps.parallel.result import PlanReport
from tests.fixtures import paths

DATA = paths.DATA / "planner"


def _structure(name: str) -> ModelStructure:
    return ModelStructure.model_validate_json((DATA / f"{name}.structure.json").read_text())


def _hardware(platform: str):
    return PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / f"{platform}.yaml")).hardware


@pytest.fixture(scope="module")
def feasible() -> tuple:
    s, cluster = _structure("llama-3-8b"), cluster_figures(_hardware("h100"), 16, 8)
    training = TrainingSpec(seq_len=8192, global_batch=64)
    return s, cluster, training, PlanReport.of(plan_parallelism(PlanningProblem.of(s, cluster, training)))


def test_a_feasible_plan_passes_with_its_headline(feasible: tuple) -> None:
    *_, report = feasible
    assert report.STEP == "parallel" and report.verdict == "pass" and report.passed
    h, best = report.headline, report.best
    assert set(h) == {"degrees", "memory per accelerator", "step time", "MFU"}
    assert h["degrees"].startswith(f"TP{best.parallel.tensor_parallel} PP{best.parallel.pipeline_parallel}")
    assert f"micro-batch {best.parallel.micro_batch}" in h["degrees"]
    assert h["memory per accelerator"].endswith("of 80 GiB") and h["MFU"].endswith("%")
    assert float(h["MFU"].rstrip("%")) < 100
    assert report.to_markdown().startswith("# Step 3: parallel plan for `llama-3-8b`: PASS")
    again = PlanReport.model_validate_json(report.model_dump_json())  # saved verdict == recomputed verdict
    assert again.verdict == "pass" and again.model_dump() == report.model_dump()


def test_no_plan_fails_naming_why_and_the_minimum_count() -> None:
    report = PlanReport.of(
        plan_parallelism(
            PlanningProblem.of(
                _structure("deepseek-v3"),
                cluster_figures(_hardware("h800"), 8, 8),
                TrainingSpec(seq_len=4096, global_batch=1536),
            )
        )
    )
    assert report.verdict == "fail" and not report.passed and len(report.reasons) == 1
    assert "needs at least 150 accelerators of 80 GiB" in report.reasons[0]
    assert f"smallest whole-node count with a feasible plan is {report.min_accelerators}" in report.reasons[0]
    assert report.headline["minimum accelerators"] == str(report.min_accelerators)
    md = report.to_markdown()
    assert md.startswith("# Step 3: parallel plan for `deepseek-v3`: FAIL")
    table = md.split("| # | TP |")[1]
    assert table.splitlines()[2].startswith("| - |") and "does not fit: needs" in table.splitlines()[2]


def test_step4_passes_with_techniques_and_their_effect(feasible: tuple) -> None:
    s, cluster, training, report = feasible
    opt = OptimizationReport.of(choose_optimizations(PlanningProblem.of(s, cluster, training), report.best))
    assert opt.STEP == "optimize" and opt.verdict == "pass"
    h = opt.headline
    used = [t for t in opt.techniques if t.chosen != t.baseline]
    assert h["techniques"] == (", ".join(f"{t.technique} {t.chosen}" for t in used) or "none needed")
    assert "dp overlap on" in h["techniques"]  # DP 2 on 16 GPUs: the gradient all-reduce is overlapped
    assert h["memory per accelerator"].endswith("of 80 GiB") and "->" in h["step time"]
    for t in opt.techniques:  # every technique used has its effect against not using it
        if t.chosen != t.baseline and any(o.value == t.baseline for o in t.options):
            assert "GiB saved" in h[t.technique] and f"vs {t.baseline}" in h[t.technique]
    assert opt.to_markdown().startswith("# Step 4: optimisations for `llama-3-8b`: PASS")


def test_step4_fails_when_the_optimized_plan_does_not_fit(feasible: tuple) -> None:
    s, _, training, report = feasible
    small = cluster_figures(_hardware("h100"), 16, 8, memory_gib=4)
    opt = OptimizationReport.of(choose_optimizations(PlanningProblem.of(s, small, training), report.best))
    assert opt.verdict == "fail"
    assert opt.reasons[0].startswith("the optimized plan does not fit: needs") and "4 GiB available" in opt.reasons[0]
    assert "FAIL" in opt.to_markdown().splitlines()[0]


def test_step4_is_skipped_with_the_reason_when_step3_had_no_plan() -> None:
    opt = OptimizationReport.skipped("deepseek-v3", "infeasible: no plan fits 8 accelerators of 80 GiB")
    assert opt.verdict == "skipped" and opt.reasons == [
        "no feasible plan: infeasible: no plan fits 8 accelerators of 80 GiB"
    ]
    assert opt.to_markdown().startswith("# Step 4: optimisations for `deepseek-v3`: SKIPPED")
