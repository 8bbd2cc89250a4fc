"""Steps 3 and 4 from a `PipelineSpec`: what the Prefect tasks and the CLI call.

    plan_for_spec(spec, structure)                  -> PlanReport        (step 3)
    optimize_for_spec(spec, structure, plan_report) -> OptimizationReport (step 4)

Contract: pure over the spec and step 1's structure; `structure_for_spec` builds the structure from the
spec's model source (step 1's meta-model analysis, about a second) for callers without step 1's result.
"""

from __future__ import annotations

from day0.analysis.structure import ModelStructure
from day0.planner.inputs import PlannerOptions, cluster_from_spec
from day0.planner.optimize import OptimizationReport, choose_optimizations
from day0.planner.results import PlanReport
from day0.planner.search import plan_parallelism
from day0.spec import PipelineSpec

__all__ = ["optimize_for_spec", "plan_for_spec", "structure_for_spec"]


def structure_for_spec(spec: PipelineSpec) -> ModelStructure:
    from day0.core.model_source import remote_code_allowed, resolve_model_source
    from day0.analysis.structure import analyze_structure
    from day0.core.modeling import build_meta_model, load_hf_config

    m = spec.model
    resolved = resolve_model_source(m.source)
    trust = remote_code_allowed(m, resolved)
    hf = load_hf_config(resolved, trust_remote_code=trust)
    return analyze_structure(build_meta_model(hf, m.source, trust_remote_code=trust), m.source)


def plan_for_spec(spec: PipelineSpec, structure: ModelStructure, options: PlannerOptions | None = None) -> PlanReport:
    constraints = None if spec.parallel == "auto" else spec.parallel
    return plan_parallelism(structure, cluster_from_spec(spec), spec.training, constraints, options)


def optimize_for_spec(spec: PipelineSpec, structure: ModelStructure, report: PlanReport,
                      options: PlannerOptions | None = None) -> OptimizationReport:
    return choose_optimizations(structure, report.cluster, spec.training, report.best, options or report.options) \
        if report.best else OptimizationReport.skipped(structure.model, report.message)
