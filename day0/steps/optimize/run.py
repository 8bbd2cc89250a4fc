"""Step 4 for a run: memory/communication techniques for step 3's best plan, each with its
estimated effect; optimized-plan.yaml is what the trial step applies."""

from day0.core.result import Progress
from day0.runs.context import RunContext
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.optimize.plan import optimize_for_spec
from day0.steps.optimize.result import OptimizationReport
from day0.steps.parallel.result import PlanReport

__all__ = ["run"]


def run(ctx: RunContext, progress: Progress, analyzed: AnalyzeResult, planned: PlanReport) -> OptimizationReport:
    return optimize_for_spec(ctx.spec, analyzed.structure, planned)
