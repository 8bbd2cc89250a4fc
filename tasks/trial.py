"""Step 5 as a Prefect task: trial training (reference vs candidate) with loss alignment and resume.

Reads step 1's resolved model, step 4's plan (else step 3's best) for recompute/sharding, and composes
step 3's cost model with the trial's own configuration for the memory estimate: what the trial
library takes as values, so it never imports another step's code. When `DAY0_TESTING_TRIAL_FAULTS`
is set (tests only, see `day0.testing.faults`), its faults are injected into the candidate's training.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from day0.analysis.results import AnalyzeResult
from day0.planner.optimize import OptimizationReport
from day0.planner.results import PlanReport
from day0.runs import RunContext
from day0.spec import HardwareSpec
from day0.testing.faults import TestingSettings
from day0.trial.loop import LoopConfig
from day0.trial.results import TrialResult
from day0.trial.step import TrialPlan, run_trial
from tasks._step import run_step, step_logger

__all__ = ["PlannerMemoryEstimate", "checkpoint_uri", "plan_from_results", "trial"]


def checkpoint_uri(ctx: RunContext) -> str:
    """Ray Train storage for this run's trial checkpoints, inside the artifact store."""
    return ctx.store().url(ctx.key("trial", "checkpoints"))


def plan_from_results(optimized: OptimizationReport | None, planned: PlanReport | None) -> TrialPlan:
    """The chosen plan's memory knobs: step 4's plan, else step 3's best; defaults without either."""
    plan = (optimized.plan if optimized else None) or (planned.best if planned else None)
    if plan is None:
        return TrialPlan()
    knobs = plan.memory_knobs
    source = "step 4 plan" if optimized and optimized.plan else "step 3 best plan"
    return TrialPlan.model_validate(
        {"recompute": knobs.recompute, "source": source, "sharding": "fsdp" if knobs.zero_stage >= 2 else "ddp"}
    )


class PlannerMemoryEstimate:
    """Step 3's cost model applied to the trial's own configuration: the scaled model, DP = workers
    (TP = PP = EP = 1), ZeRO 0 for DDP or 3 for FSDP, the plan's recompute and the loop's micro-batch.
    No framework reserve or fragmentation: the measured figure is the process's own peak."""

    source = "step 3 cost model, same configuration (TP1 PP1, DP = workers)"

    def __init__(self, hardware: HardwareSpec) -> None:
        self.hardware = hardware

    def __call__(self, config: dict[str, Any], plan: TrialPlan, loop: LoopConfig, workers: int) -> float | None:
        from transformers import AutoConfig

        from day0.analysis.structure import analyze_structure
        from day0.core.modeling import build_meta_model
        from day0.planner.inputs import PlannerOptions, cluster_figures
        from day0.planner.search import plan_parallelism
        from day0.spec import ParallelConstraints, Precision, TrainingSpec

        structure = analyze_structure(build_meta_model(AutoConfig.for_model(**config), "trial", "fp32"), "trial")
        training = TrainingSpec(
            seq_len=loop.seq_len,
            global_batch=loop.micro_batch * workers,
            micro_batch=loop.micro_batch,
            precision=Precision(compute=loop.compute_dtype, master_weights="fp32"),
        )
        options = PlannerOptions(
            micro_batches=[loop.micro_batch],
            recompute=[plan.recompute],
            offload=["none"],
            zero_stages=[3 if plan.sharding == "fsdp" else 0],
            framework_overhead_gib=0,
            fragmentation_fraction=0,
            flash_attention=False,
        )
        degrees = ParallelConstraints(
            tensor_parallel=1, pipeline_parallel=1, expert_parallel=1, context_parallel=1, data_parallel=workers
        )
        report = plan_parallelism(
            structure,
            cluster_figures(self.hardware, workers, workers),
            training,
            degrees,
            options,
            find_min_accelerators=False,
        )
        return report.best.memory.total_bytes if report.best else None


@task(name="trial", cache_policy=NO_CACHE)
def trial(
    ctx: RunContext, analyzed: AnalyzeResult, planned: PlanReport, optimized: OptimizationReport, max_failures: int = 2
) -> TrialResult:
    """Train the reference and the candidate on step 1's model with step 4's (else step 3's) plan."""
    log, spec = step_logger(), ctx.spec
    faults = TestingSettings().trial_faults
    if faults is not None:
        log.warning("trial: injecting test-only faults from DAY0_TESTING_TRIAL_FAULTS: %s", faults.describe())
    return run_step(
        "trial",
        ctx,
        TrialResult,
        lambda: run_trial(
            spec,
            analyzed.model,
            checkpoint_uri=checkpoint_uri(ctx),
            plan=plan_from_results(optimized, planned),
            hooks=faults,
            max_failures=max_failures,
            memory_estimate=PlannerMemoryEstimate(spec.platform.hardware),
            progress=lambda msg: log.info("trial: %s", msg),
        ),
        variant=faults.describe() if faults else None,
    )
