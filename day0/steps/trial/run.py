"""Step 5 for a run: trial training (reference vs candidate) with loss alignment and resume.

Reads step 1's resolved model, step 4's plan (else step 3's best) for recompute/sharding, and composes
step 3's cost model with the trial's own configuration for the memory estimate: what the trial
library takes as values, so it never imports another step's code. When `DAY0_TRIAL_FAULTS` is set
(a fault drill, see `faults`), its faults are injected into the candidate's training.
"""

from __future__ import annotations

from day0.backends.base import run_step_job
from day0.core.result import Progress
from day0.core.typing import HFConfigDict
from day0.planner.profile import CalibratedProfile, load_profile
from day0.planner.trial_estimate import TrialPrediction, predict_trial
from day0.runs.context import RunContext
from day0.spec.cluster import HardwareSpec
from day0.spec.pipeline import PipelineSpec
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.operators.result import OperatorsResult
from day0.steps.optimize.result import OptimizationReport
from day0.steps.parallel.result import PlanReport
from day0.steps.trial.faults import FaultDrillSettings
from day0.steps.trial.job import JOB, TrialRequest
from day0.steps.trial.loop import LoopConfig
from day0.steps.trial.result import TrialResult
from day0.steps.trial.train import TrialPlan, candidate_loop, scaled_model

__all__ = [
    "PlannerMemoryEstimate",
    "calibrate_command",
    "checkpoint_uri",
    "drill",
    "plan_from_results",
    "run",
    "scaled_model",
]


def checkpoint_uri(ctx: RunContext) -> str:
    """Ray Train storage for this run's trial checkpoints, inside the artifact store."""
    return ctx.store.url(ctx.key("trial", "checkpoints"))


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
    (TP = PP = EP = 1), ZeRO 0 for DDP or 3 for FSDP, the plan's recompute and the loop's micro-batch,
    with the platform's calibrated profile when `day0 calibrate` stored one, else its datasheet. No
    framework reserve or fragmentation: the measured figure is the process's own peak."""

    def __init__(self, hardware: HardwareSpec, profile: CalibratedProfile | None = None) -> None:
        self.hardware, self.profile = hardware, profile

    @property
    def source(self) -> str:
        figures = "calibrated profile" if self.profile else "datasheet"
        return f"step 3 cost model ({figures}), same configuration (TP1 PP1, DP = workers), eager-op traffic counted"

    def predict(
        self, config: HFConfigDict, plan: TrialPlan, loop: LoopConfig, workers: int, step_time: bool = True
    ) -> TrialPrediction:
        """The prediction; `step_time=False` skips counting the eager ops' traffic (a real forward and
        backward of the model's first layers), which only the step time needs."""
        from transformers import AutoConfig

        from day0.model.build import build_meta_model
        from day0.model.structure import analyze_structure
        from day0.steps.trial.traffic import eager_traffic_bytes

        structure = analyze_structure(build_meta_model(AutoConfig.for_model(**config), "trial", "fp32"), "trial")
        eager = (
            eager_traffic_bytes(config, structure.layer_kind_of, loop.micro_batch, loop.seq_len, loop.compute_dtype)
            if step_time
            else None
        )
        return predict_trial(
            structure,
            self.profile or self.hardware,
            seq_len=loop.seq_len,
            micro_batch=loop.micro_batch,
            workers=workers,
            compute_dtype=loop.compute_dtype,
            recompute=plan.recompute,
            zero_stage=3 if plan.sharding == "fsdp" else 0,
            flash_attention=False,
            eager_bytes=eager,
        )

    def __call__(self, config: HFConfigDict, plan: TrialPlan, loop: LoopConfig, workers: int) -> float | None:
        return self.predict(config, plan, loop, workers, step_time=False).peak_bytes


def calibrate_command(spec: PipelineSpec) -> str:
    """What gives the cost check's calibrated figure: a stored profile, then this run recomputed
    (a reused step keeps the figures it was computed with)."""
    store = "" if spec.storage == "file://.day0" else f" --store {spec.storage}"
    return f"`day0 calibrate {spec.platform.name}{store}`, then `day0 run SPEC --fresh`"


def drill() -> str | None:
    """The fault drill this process injects (`DAY0_TRIAL_FAULTS`), described; None without one."""
    faults = FaultDrillSettings().trial_faults
    return faults.describe() if faults else None


def run(
    ctx: RunContext,
    progress: Progress,
    analyzed: AnalyzeResult,
    planned: PlanReport,
    optimized: OptimizationReport,
    checked: OperatorsResult | None = None,
) -> TrialResult:
    """Train the reference and the candidate on step 1's model with step 4's (else step 3's) plan and,
    when step 2 ran and passed, its adaptations in the candidate's platform kernels, as a job on the
    run's backend; then put step 3's prediction beside the measured step time and peaks."""
    spec, faults = ctx.spec, FaultDrillSettings().trial_faults
    if faults is not None:
        progress(f"fault drill from DAY0_TRIAL_FAULTS: injecting {faults.describe()}")
    plan = plan_from_results(optimized, planned)
    backend = ctx.backend
    request = TrialRequest(
        spec=spec,
        model=analyzed.model,
        checkpoint_uri=checkpoint_uri(ctx),
        plan=plan,
        max_failures=spec.trial.max_failures,
        faults=faults,
        adaptations=checked.ops.adaptations if checked else [],
        on_cluster=backend.kind != "local",
    )
    result = run_step_job(backend, "trial", JOB, request, progress)
    estimate = PlannerMemoryEstimate(spec.platform.hardware, load_profile(ctx.store, spec.platform.name))
    loop = candidate_loop(spec, result.scaled_config, plan)
    predicted = estimate.predict(result.scaled_config, plan, loop, spec.trial.workers)
    result = result.with_memory_estimate(predicted.peak_bytes, estimate.source)
    return result.with_cost_check(
        predicted.step_time_s, predicted.peak_bytes, predicted.source, calibrate_command(spec)
    )
