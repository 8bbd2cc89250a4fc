"""Step 5 end to end: scale the model, run the reference and the candidate through Ray Train with the
same data order and seeds, compare the curves, and collect checkpoints, recoveries and memory.

    from day0.trial import run_trial, TrialPlan
    result = run_trial(spec, checkpoint_uri="file://.day0/runs/<name>/<id>/trial/checkpoints",
                       plan=TrialPlan(recompute="selective", sharding="fsdp"))

Contract: the reference is `trial.reference`: `cpu-fp32` (one CPU worker, fp32, no recompute, DDP
semantics) or the URI of a saved `TrialCurve`/`TrialResult` JSON (file path, file:// or s3://). The
candidate runs on the spec's platform with `training.precision.compute`, `trial.workers` workers
and the plan's recompute/sharding. Both runs live under `checkpoint_uri` as `reference` and
`candidate`; calling again with the same URI resumes each from its last checkpoint.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import BaseModel, Field

from day0.core.model_source import resolve_model_source
from day0.errors import UsageError
from day0.planner.optimize import OptimizationReport
from day0.planner.results import PlanReport
from day0.settings import StoreSettings
from day0.spec import HardwareSpec, PipelineSpec
from day0.trial.alignment import AlignmentThresholds, compare_curves
from day0.trial.data import TokenData, prepare_data
from day0.trial.loop import LoopConfig, TrialFaults
from day0.trial.model import EXPERT_KEYS, scale_config
from day0.trial.results import (MemoryComparison, TrialCurve, TrialResult, recoveries, steady_tokens_per_s,
                                summarize_run)
from day0.trial.run import TrainingRun, event_log, run_training

__all__ = ["TRIAL_VOCAB", "MemoryEstimate", "TrialTrainingError", "TrialPlan", "planner_estimate", "plan_from_results", "run_trial"]

TRIAL_VOCAB = 512  # byte-level BPE vocabulary of the trial tokenizer
Progress = Callable[[str], None]


class TrialTrainingError(RuntimeError):
    """A trial run failed for good (retries exhausted); its checkpoints stay for the rerun to resume."""


class TrialPlan(BaseModel):
    """Step 3/4 choices the candidate applies (defaults: plain DDP, no recompute)."""

    recompute: Literal["none", "selective", "full"] = "none"
    sharding: Literal["ddp", "fsdp"] = Field("ddp", description="ZeRO stage 0-1 -> DDP, 2-3 -> FSDP2.")
    source: str = Field("default", description="Where these choices came from.")


# (scaled HF config, plan, loop config, workers) -> bytes per worker
MemoryEstimate = Callable[[dict[str, Any], TrialPlan, LoopConfig, int], float | None]


def plan_from_results(optimized: OptimizationReport | None, planned: PlanReport | None) -> TrialPlan:
    """The chosen plan's memory knobs: step 4's plan, else step 3's best; defaults without either."""
    plan = (optimized.plan if optimized else None) or (planned.best if planned else None)
    if plan is None:
        return TrialPlan()
    knobs = plan.memory_knobs
    return TrialPlan(recompute=knobs.recompute, sharding="fsdp" if knobs.zero_stage >= 2 else "ddp",
                     source="step 4 plan" if optimized and optimized.plan else "step 3 best plan")


def planner_estimate(hardware: HardwareSpec) -> MemoryEstimate:
    """Step 3's cost model applied to the trial's own configuration: the scaled model, DP = workers
    (TP = PP = EP = 1), ZeRO 0 for DDP or 3 for FSDP, the plan's recompute and the loop's micro-batch.
    No framework reserve or fragmentation: the measured figure is the process's own peak."""
    from day0.analysis.structure import analyze_structure
    from day0.core.modeling import build_meta_model
    from day0.planner.inputs import PlannerOptions, cluster_figures
    from day0.planner.search import plan_parallelism
    from day0.spec import ParallelConstraints, Precision, TrainingSpec
    from day0.trial.model import _hf_config

    def estimate(config: dict[str, Any], plan: TrialPlan, loop: LoopConfig, workers: int) -> float | None:
        structure = analyze_structure(build_meta_model(_hf_config(config), "trial", "fp32"), "trial")
        training = TrainingSpec(seq_len=loop.seq_len, global_batch=loop.micro_batch * workers,
                                micro_batch=loop.micro_batch,
                                precision=Precision(compute=loop.compute_dtype, master_weights="fp32"))
        options = PlannerOptions(micro_batches=[loop.micro_batch], recompute=[plan.recompute], offload=["none"],
                                 zero_stages=[3 if plan.sharding == "fsdp" else 0], framework_overhead_gib=0,
                                 fragmentation_fraction=0, flash_attention=False)
        degrees = ParallelConstraints(tensor_parallel=1, pipeline_parallel=1, expert_parallel=1,
                                      context_parallel=1, data_parallel=workers)
        report = plan_parallelism(structure, cluster_figures(hardware, workers, workers), training, degrees,
                                  options, find_min_accelerators=False)
        return report.best.memory.total_bytes if report.best else None

    return estimate


def _load_curve(uri: str, settings: StoreSettings | None) -> TrialCurve:
    parsed = urlparse(uri)
    try:
        if parsed.scheme == "s3":
            from day0.store import open_store

            parent, _, name = uri.rpartition("/")
            raw = open_store(parent, settings).get_json(name)
        else:
            raw = json.loads(open(parsed.path if parsed.scheme == "file" else uri).read())
    except (OSError, ValueError) as exc:
        raise UsageError(f"trial.reference: cannot read a curve from {uri!r}: {exc}") from None
    return TrialCurve.model_validate(raw.get("reference", raw) if "loss" not in raw else raw)


def _curve(label: str, platform: str, loop: LoopConfig, workers: int, run: TrainingRun) -> TrialCurve:
    h = run.history
    return TrialCurve(label=label, platform=platform, compute_dtype=loop.compute_dtype, workers=workers,
                      sharding=loop.sharding, recompute=loop.recompute, steps=[r.step for r in h],
                      loss=[r.loss for r in h], grad_norm=[r.grad_norm for r in h], tokens_per_s=steady_tokens_per_s(h))


def _scaled_summary(cfg: dict[str, Any], data: TokenData) -> dict[str, int | None]:
    from day0.trial.model import _hf_config, count_parameters
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        params = count_parameters(AutoModelForCausalLM.from_config(_hf_config(cfg)))
    return {"layers": cfg.get("num_hidden_layers"), "hidden": cfg.get("hidden_size"),
            "experts": next((cfg[k] for k in EXPERT_KEYS if cfg.get(k)), None), "vocab": data.vocab_size,
            "parameters": params}


def run_trial(spec: PipelineSpec, *, checkpoint_uri: str, plan: TrialPlan | None = None,
              faults: TrialFaults | None = None, max_failures: int = 2, progress: Progress | None = None,
              memory_estimate: MemoryEstimate | None = None, store_settings: StoreSettings | None = None,
              ray_address: str | None = None, resources_per_worker: dict[str, float] | None = None,
              log=None) -> TrialResult:  # noqa: ANN001
    """Run step 5 for `spec` (see the module docstring). `faults` are test-only injected bugs."""
    from day0.backends.local import connect

    t0, say = time.time(), progress or (lambda msg: None)
    plan, trial, notes = plan or TrialPlan(), spec.trial, []
    connect(ray_address or spec.cluster.address)
    data = prepare_data(trial.dataset, TRIAL_VOCAB)
    cfg = scale_config(resolve_model_source(spec.model.source).config, trial.scale, vocab_size=data.vocab_size,
                       seq_len=trial.seq_len, eos_token_id=data.eos_token_id)
    compute = spec.training.precision.compute
    if compute == "fp8":
        compute = "bf16"
        notes.append("fp8 compute is not trained in the trial; the candidate runs bf16 autocast")
    base = LoopConfig(model_config_dict=cfg, seed=trial.seed, steps=trial.steps,
                      global_batch=trial.micro_batch * trial.workers, micro_batch=trial.micro_batch,
                      seq_len=trial.seq_len, learning_rate=trial.learning_rate,
                      lr_warmup_steps=min(10, trial.steps // 10), checkpoint_every=trial.checkpoint_every)
    candidate_loop = base.model_copy(update={"compute_dtype": compute, "recompute": plan.recompute,
                                             "sharding": plan.sharding, "device_type": spec.platform.device_type,
                                             "faults": faults or TrialFaults()})
    log = log or event_log()
    common = dict(storage_uri=checkpoint_uri, max_failures=max_failures, log=log, store_settings=store_settings)
    runs, reference = [], None
    if trial.reference == "cpu-fp32":
        say(f"reference: {trial.steps} steps on 1 CPU worker, fp32")
        ref_run = run_training(base.model_copy(update={"micro_batch": base.global_batch}), data.tokens,
                               name="reference", workers=1, **common)
        runs.append(summarize_run("reference", ref_run))
        reference = _curve("reference cpu-fp32", "cpu", base, 1, ref_run)
    else:
        reference = _load_curve(trial.reference, store_settings)
        notes.append(f"reference curve loaded from {trial.reference}")
    use_gpu = spec.platform.device_type == "cuda"
    say(f"candidate: {trial.steps} steps on {trial.workers} {spec.platform.name} worker(s), {compute}, "
        f"{plan.sharding}, recompute {plan.recompute}")
    cand_run = run_training(candidate_loop, data.tokens, name="candidate", workers=trial.workers, use_gpu=use_gpu,
                            backend=spec.platform.distributed_backend,
                            resources_per_worker=resources_per_worker, **common)
    runs.append(summarize_run("candidate", cand_run))
    candidate = _curve(f"candidate {spec.platform.name}-{compute} x{trial.workers}", spec.platform.name,
                       candidate_loop, trial.workers, cand_run)
    failed = [r for r in runs if r.error]
    if failed:
        raise TrialTrainingError("; ".join(
            f"{r.role} training failed after {r.attempts} attempt(s): {r.error}" for r in failed)
            + f". Checkpoints are kept under {checkpoint_uri}: rerun the same spec to resume.")
    tol = trial.tolerance
    alignment = compare_curves(reference.loss, candidate.loss, reference_grad_norm=reference.grad_norm,
                               candidate_grad_norm=candidate.grad_norm, thresholds=AlignmentThresholds(
                                   loss_mean_rel=tol.loss_mean_rel, first_step_abs=tol.first_step_abs,
                                   first_step_rel=tol.first_step_rel, warmup_steps=tol.warmup_steps))
    estimate = memory_estimate or planner_estimate(spec.platform.hardware)
    source = "step 3 cost model, same configuration (TP1 PP1, DP = workers)"
    est = estimate(cfg, plan, candidate_loop, trial.workers)
    baselines = {e.rank: e.baseline_bytes or 0 for e in cand_run.events if e.kind == "memory"}
    memory = [MemoryComparison(rank=r, measured_peak_bytes=b, measured_training_bytes=b - baselines.get(r, 0),
                               estimate_bytes=est, estimate_source=source)
              for r, b in sorted(cand_run.peak_memory_bytes.items())]
    if plan.source != "default":
        notes.append(f"plan from {plan.source}: recompute {plan.recompute}, sharding {plan.sharding}")
    return TrialResult(model=spec.model.source, scaled=_scaled_summary(cfg, data), dataset=data.dataset,
                       seq_len=trial.seq_len, global_batch=base.global_batch, steps=trial.steps,
                       reference=reference, candidate=candidate, alignment=alignment, runs=runs,
                       recoveries=recoveries(cand_run.events), memory=memory, notes=notes, seconds=time.time() - t0)
