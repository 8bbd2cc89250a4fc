"""The cost model's prediction of step 5's own run: the trial's scaled model, data-parallel over its
workers, at its micro-batch, dtype, recompute and sharding, on the calibrated profile when there is one.

Contract: pure. `predict_trial` evaluates exactly one plan (TP = PP = EP = CP = 1, DP = workers, one
micro-batch per step, no framework reserve: the trial measures its training part apart; the trial's own
unfused foreach AdamW) with the same `PlanContext` step 3 ranks plans with, so the trial's measurement
checks the model step 3 trusts, host dispatch of every op included. On a synchronous platform (the
CPU) the gradient all-reduce is not overlapped: the cores that would hide it are the ones reducing.

The trial runs Hugging Face modules eagerly, not the fused kernels step 3 plans for: given the bytes
its eager ops move (`day0.steps.trial.traffic`), what they move beyond the fused accounting is added at the
memory bandwidth (`eager_seconds`). Under DDP its gradients pass through torch's flat buckets
(`ddp_bucket_seconds`) and the loop all-reduces the step's loss: one collective latency more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from day0.core.precision import DType
from day0.planner.evaluate import PlanContext
from day0.planner.inputs import CommSettings, PlannerOptions, cluster_figures
from day0.planner.problem import PlanningProblem
from day0.planner.profile import CalibratedProfile, apply_profile
from day0.planner.values import Degrees, MemoryKnobs
from day0.spec.cluster import HardwareSpec
from day0.spec.pipeline import Precision, TrainingSpec

if TYPE_CHECKING:
    from day0.model.structure import ModelStructure

__all__ = ["TrialPrediction", "ddp_bucket_seconds", "eager_seconds", "predict_trial"]


class TrialPrediction(NamedTuple):
    step_time_s: float  # one optimizer step of the candidate (forward, backward, DP sync, AdamW)
    peak_bytes: float  # per worker: model states + activations + buffers (no runtime/fragmentation reserve)
    source: str  # "datasheet" or "calibrated <date>": which figures the prediction used


def eager_seconds(eager_bytes: float, fused_bytes: float, hbm_bytes_per_s: float) -> float:
    """Memory-bound time an eager step spends beyond what fused kernels would: the bytes its ops move
    past the fused accounting, at the memory bandwidth (never negative)."""
    return max(0.0, eager_bytes - fused_bytes) / hbm_bytes_per_s


def ddp_bucket_seconds(grad_bytes: float, hbm_bytes_per_s: float) -> float:
    """torch DDP's passes over the gradients beside the all-reduce (its default hook, without
    `gradient_as_bucket_view`): copy into the flat bucket, divide by the world size in place, copy
    back; each reads and writes the gradient bytes once."""
    return 3 * 2 * grad_bytes / hbm_bytes_per_s


def predict_trial(
    structure: ModelStructure,
    profile_or_hardware: CalibratedProfile | HardwareSpec,
    seq_len: int,
    micro_batch: int,
    workers: int,
    compute_dtype: DType = "fp32",
    recompute: str = "none",
    zero_stage: int = 0,
    flash_attention: bool = False,
    eager_bytes: float | None = None,
) -> TrialPrediction:
    """Step time and peak bytes per worker of the trial's configuration (FSDP is ZeRO-3, DDP ZeRO-0;
    Hugging Face eager attention stores its scores: `flash_attention=False`); `eager_bytes`: what its
    eager ops move per forward + backward on a worker (None: fused kernels, as step 3 assumes)."""
    options = PlannerOptions(
        micro_batches=[micro_batch],
        recompute=[recompute],  # type: ignore[list-item]  # validated by PlannerOptions
        zero_stages=[zero_stage],
        offload=["none"],
        framework_overhead_gib=0,
        fragmentation_fraction=0,
        flash_attention=flash_attention,
        fused_optimizer=False,
    )
    if isinstance(profile_or_hardware, CalibratedProfile):
        hardware, options = apply_profile(profile_or_hardware.datasheet, options, profile_or_hardware)
    else:
        hardware = profile_or_hardware
    if not hardware.launch_async:  # the host's own cores run gloo's reduction: nothing to hide it behind
        options = options.model_copy(update={"comm": CommSettings(dp_overlap=False)})
    training = TrainingSpec(
        seq_len=seq_len,
        global_batch=micro_batch * workers,
        micro_batch=micro_batch,
        precision=Precision(compute=compute_dtype, master_weights="fp32"),
    )
    d = Degrees(
        tensor_parallel=1,
        pipeline_parallel=1,
        virtual_pipeline_stages=1,
        expert_parallel=1,
        expert_tensor_parallel=1,
        context_parallel=1,
        data_parallel=workers,
        micro_batch=micro_batch,
        num_microbatches=1,
    )
    cluster = cluster_figures(hardware, workers, workers)
    ctx = PlanContext(PlanningProblem.of(structure, cluster, training, options=options), d)
    knobs = MemoryKnobs(recompute=recompute, zero_stage=zero_stage, offload="none")
    step = ctx.time(knobs).step_s
    if eager_bytes is not None:  # forward + backward: 3x the forward's memory-bound bytes (stage_seconds)
        work, tokens = ctx.groups[0].work, ctx.rates.tokens
        fused = 3 * tokens * (work.memory_bound + (0 if flash_attention else seq_len * work.scores_traffic_per_seq))
        step += eager_seconds(eager_bytes, fused, ctx.rates.hbm)
    if zero_stage == 0 and workers > 1:
        grads = (ctx.dense[0] + ctx.embhead[0] + ctx.expert[0]) * ctx.pb.grad
        step += ddp_bucket_seconds(grads, ctx.rates.hbm) + options.collective_latency_us * 1e-6
    return TrialPrediction(step, ctx.memory(knobs).total_bytes, options.profile)
