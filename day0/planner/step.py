"""Steps 3 and 4 from a `PipelineSpec`: what the Prefect tasks and the CLI call.

    plan_for_spec(spec, structure)                  -> PlanReport        (step 3)
    optimize_for_spec(spec, structure, plan_report) -> OptimizationReport (step 4)

Contract: pure over the spec and step 1's structure (`AnalyzeResult.structure`).
"""

from __future__ import annotations

from day0.analysis.results import ModelStructure
from day0.planner.inputs import PlannerOptions, cluster_from_spec
from day0.planner.optimize import OptimizationReport, choose_optimizations
from day0.planner.results import PlanReport
from day0.planner.search import plan_parallelism
from day0.spec import PipelineSpec

__all__ = ["optimize_for_spec", "plan_for_spec"]


def plan_for_spec(spec: PipelineSpec, structure: ModelStructure, options: PlannerOptions | None = None) -> PlanReport:
    constraints = None if spec.parallel == "auto" else spec.parallel
    return plan_parallelism(structure, cluster_from_spec(spec), spec.training, constraints, options)


def optimize_for_spec(
    spec: PipelineSpec, structure: ModelStructure, report: PlanReport, options: PlannerOptions | None = None
) -> OptimizationReport:
    return (
        choose_optimizations(structure, report.cluster, spec.training, report.best, options or report.options)
        if report.best
        else OptimizationReport.skipped(structure.model, report.message)
    )
