"""Step 4 on a spec alone (no run context): the techniques for step 3's best plan. `run.py` calls it for
a run; `day0 plan` calls it directly."""

from day0.model.structure import ModelStructure
from day0.planner.problem import PlanningProblem
from day0.spec.pipeline import PipelineSpec
from day0.steps.optimize.result import OptimizationReport
from day0.steps.optimize.techniques import choose_optimizations
from day0.steps.parallel.result import PlanReport

__all__ = ["optimize_for_spec"]


def optimize_for_spec(spec: PipelineSpec, structure: ModelStructure, report: PlanReport) -> OptimizationReport:
    if report.best is None:
        return OptimizationReport.skipped(structure.model, report.message)
    problem = PlanningProblem.of(structure, report.cluster, spec.training, options=report.options)
    chosen = choose_optimizations(problem, report.best)
    plan = chosen.plan.with_band(report.band) if chosen.plan is not None else None
    return OptimizationReport.of(chosen.model_copy(update={"plan": plan, "band": report.band}))
