"""Step 5 end to end: scale step 1's model, run the reference and the candidate through Ray Train
with the same data order and seeds, compare the curves, and collect checkpoints, recoveries and memory.

    from day0.steps.trial.train import run_trial, TrialPlan
    result = run_trial(spec, analyzed.model, checkpoint_uri="file://.day0/runs/<name>/<id>/trial/checkpoints",
                       plan=TrialPlan(recompute="selective", sharding="fsdp"))

Contract: the model is step 1's `ResolvedModel` (its config.json), never the spec's source again.
The reference is `trial.reference`: `cpu-fp32` (one CPU worker, fp32, no recompute, DDP semantics)
or the URI of a saved `TrialCurve`/`TrialResult` JSON (file path, file:// or s3://). The candidate
runs on the spec's platform with `training.precision.compute` (fp8 trains as bf16 autocast),
`trial.workers` workers and the plan's recompute/sharding; both see the same global batch per step.
Both runs live under `checkpoint_uri` as `reference` and `candidate`; calling again with the same URI
resumes each from its last checkpoint. A failed run raises `TrialTrainingError`. The caller supplies
what comes from other steps: the plan (`TrialPlan`) and the memory estimate (`MemoryPredictor`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, TypedDict, cast
from urllib.parse import urlparse

from pydantic import BaseModel, Field

from day0.backends.resources import accelerator_resource, train_worker_resources
from day0.core.library_logs import quiet_known_library_logs
from day0.core.precision import host_compute_dtype
from day0.core.recompute import Recompute
from day0.core.result import Progress
from day0.core.typing import HFConfigDict
from day0.errors import UsageError
from day0.model.plausible import EXPERT_KEYS
from day0.model.source import ResolvedModel
from day0.platforms.adapted import AdaptedKernel
from day0.settings import StoreSettings
from day0.spec.checks import reference_issues
from day0.spec.pipeline import PipelineSpec
from day0.steps.operators.result import Adaptation
from day0.steps.trial.alignment import compare_curves, reference_noise
from day0.steps.trial.config import CPU_REFERENCE, TrialSpec
from day0.steps.trial.data import TokenData, prepare_data
from day0.steps.trial.loop import LoopConfig, LoopHooks, LoopStep, TrainDtype, platform_mode
from day0.steps.trial.model import scale_config
from day0.steps.trial.ray_train import EventLog, TrainingRun, event_log, run_training
from day0.steps.trial.result import (
    MemoryComparison,
    TrainingRunSummary,
    TrialCurve,
    TrialResult,
    recoveries,
    steady_tokens_per_s,
    summarize_run,
)

if TYPE_CHECKING:
    import numpy as np
    from ray.actor import ActorHandle

__all__ = [
    "TRIAL_VOCAB",
    "MemoryPredictor",
    "TrialPlan",
    "TrialTrainingError",
    "adapted_kernels",
    "candidate_loop",
    "run_trial",
    "scaled_model",
]

TRIAL_VOCAB = 512  # byte-level BPE vocabulary of the trial tokenizer


class TrialTrainingError(RuntimeError):
    """A trial run failed for good (retries exhausted); its checkpoints stay for the rerun to resume."""


class TrialPlan(BaseModel):
    """Step 3/4 choices the candidate applies (defaults: plain DDP, no recompute)."""

    recompute: Recompute = "none"
    sharding: Literal["ddp", "fsdp"] = Field("ddp", description="ZeRO stage 0-1 -> DDP, 2-3 -> FSDP2.")
    source: str = Field("default", description="Where these choices came from.")


class MemoryPredictor(Protocol):
    """Estimated bytes per candidate worker for (scaled HF config, plan, loop, workers), or None."""

    source: str  # what made the estimate, for the report

    def __call__(self, config: HFConfigDict, plan: TrialPlan, loop: LoopConfig, workers: int) -> float | None: ...


def _load_curve(uri: str, settings: StoreSettings | None) -> TrialCurve:
    if issues := reference_issues(uri):  # the check `day0 validate` makes
        raise UsageError(str(issues[0]))
    parsed = urlparse(uri)
    try:
        if parsed.scheme == "s3":
            from day0.store import open_store

            parent, _, name = uri.rpartition("/")
            raw = open_store(parent, settings).get_json(name)
        else:
            raw = json.loads(Path(parsed.path if parsed.scheme == "file" else uri).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"trial.reference: cannot read a curve from {uri!r}: {exc}") from None
    return TrialCurve.model_validate(raw.get("reference", raw) if "loss" not in raw else raw)


def adapted_kernels(adaptations: Sequence[Adaptation]) -> list[AdaptedKernel]:
    """Step 2's adaptations that fixed their op, as the data the trial rebuilds the kernels from."""
    out = []
    for a in adaptations:
        if a.strategy is None:
            continue
        served = a.recheck.served_by if a.recheck else []
        plugin = next((x.removeprefix("plugin:") for x in served if x.startswith("plugin:")), None)
        plugin = plugin if a.strategy == "plugin" else None
        out.append(
            AdaptedKernel.model_validate({"op": a.op, "dtype": a.dtype, "strategy": a.strategy, "plugin": plugin})
        )
    return out


def _kernels(loop: LoopConfig, history: list[LoopStep]) -> str:
    """Which kernels the curve ran on, with the last step's calls per source."""
    if loop.platform is None or not history or not history[-1].kernel_calls:
        return "stock" if loop.platform is None else f"stock ({loop.platform.name} has nothing to emulate)"
    calls = ", ".join(f"{k} {v}" for k, v in sorted(history[-1].kernel_calls.items(), key=lambda kv: -kv[1]))
    adapted = f", {len(loop.adaptations)} step-2 adaptation(s)" if loop.adaptations else ""
    return f"{loop.platform.name} kernel table{adapted} (op calls in the last step: {calls})"


def _curve(label: str, platform: str, loop: LoopConfig, workers: int, run: TrainingRun) -> TrialCurve:
    h = run.history
    return TrialCurve.from_history(
        h,
        label,
        platform,
        loop.compute_dtype,
        workers,
        device=loop.device_type,
        kernels=_kernels(loop, h),
        sharding=loop.sharding,
        recompute=loop.recompute,
        tokens_per_s=steady_tokens_per_s(h),
    )


def _scaled_summary(cfg: HFConfigDict, data: TokenData) -> dict[str, int | None]:
    import torch
    from transformers import AutoModelForCausalLM

    from day0.steps.trial.model import _hf_config, count_parameters

    with torch.device("meta"):
        params = count_parameters(AutoModelForCausalLM.from_config(_hf_config(cfg)))
    return {
        "layers": cfg.get("num_hidden_layers"),
        "hidden": cfg.get("hidden_size"),
        "experts": next((cfg[k] for k in EXPERT_KEYS if cfg.get(k)), None),
        "vocab": data.vocab_size,
        "parameters": params,
    }


def _loops(
    spec: PipelineSpec,
    cfg: HFConfigDict,
    plan: TrialPlan,
    notes: list[str],
    device_present: bool = False,
    adaptations: Sequence[AdaptedKernel] = (),
) -> tuple[LoopConfig, LoopConfig]:
    """(reference loop, candidate loop): the same model, seed, data order and global batch; the candidate
    at the plan's compute dtype, with the plan's recompute and sharding, under the platform's kernel
    table with step 2's adaptations, on the platform's device when present (else emulated on the host)."""
    trial, (compute, fp8_note) = spec.trial, host_compute_dtype(spec.training.precision.compute)
    notes += [fp8_note] if fp8_note else []
    global_batch = trial.micro_batch * trial.workers
    candidate = LoopConfig(
        model_config_dict=cfg,
        seed=trial.seed,
        steps=trial.steps,
        global_batch=global_batch,
        micro_batch=trial.micro_batch,
        seq_len=trial.seq_len,
        learning_rate=trial.learning_rate,
        lr_warmup_steps=min(10, trial.steps // 10),
        checkpoint_every=trial.checkpoint_every,
        compute_dtype=cast(TrainDtype, compute),
        recompute=plan.recompute,
        sharding=plan.sharding,
        device_type=spec.platform.device_type if device_present else "cpu",
        platform=spec.platform,
        adaptations=list(adaptations),
    )
    reference = candidate.model_copy(
        update={
            "micro_batch": global_batch,
            "compute_dtype": "fp32",
            "recompute": "none",
            "sharding": "ddp",
            "device_type": "cpu",
            "platform": None,
            "adaptations": [],
        }
    )
    return reference, candidate


def candidate_loop(spec: PipelineSpec, cfg: HFConfigDict, plan: TrialPlan) -> LoopConfig:
    """The candidate's loop for the scaled config `cfg` (what a memory estimate models)."""
    return _loops(spec, cfg, plan, [])[1]


def _memory(run: TrainingRun, estimate: float | None, source: str) -> list[MemoryComparison]:
    baselines = {e.rank: e.baseline_bytes or 0 for e in run.events if e.kind == "memory"}
    counted = {e.rank: e.tensor_bytes for e in run.events if e.kind == "memory"}
    return [
        MemoryComparison(
            rank=r,
            measured_peak_bytes=b,
            measured_training_bytes=b - baselines.get(r, 0),
            measured_tensor_bytes=counted.get(r),
            estimate_bytes=estimate,
            estimate_source=source,
        )
        for r, b in sorted(run.peak_memory_bytes.items())
    ]


def _raise_failed(runs: list[TrainingRunSummary], checkpoint_uri: str) -> None:
    failed = [r for r in runs if r.error]
    if failed:
        raise TrialTrainingError(
            "; ".join(f"{r.role} training failed after {r.attempts} attempt(s): {r.error}" for r in failed)
            + f". Checkpoints are kept under {checkpoint_uri}: rerun the same spec to resume."
        )


class _RunOptions(TypedDict):
    """What the reference and the candidate run share: `run_training`'s keyword arguments."""

    storage_uri: str
    max_failures: int
    log: ActorHandle[EventLog]
    store_settings: StoreSettings | None
    progress: Progress


def _reference(
    spec: PipelineSpec, loop: LoopConfig, tokens: np.ndarray, common: _RunOptions, notes: list[str], say: Progress
) -> tuple[TrialCurve, TrainingRun | None]:
    """The reference curve: trained here (`cpu-fp32`), or loaded from a saved curve."""
    if spec.trial.reference != CPU_REFERENCE:
        notes.append(f"reference curve loaded from {spec.trial.reference}")
        return _load_curve(spec.trial.reference, common["store_settings"]), None
    say(f"reference: {loop.steps} steps on 1 CPU worker, fp32")
    run = run_training(loop, tokens, name="reference", workers=1, **common)
    return _curve("reference cpu-fp32 x1", "cpu", loop, 1, run), run


def _advertised(resource: str) -> bool:
    """Whether the Ray cluster has the platform's accelerator (GPU, or a custom resource: NPU ...)."""
    import ray

    return ray.cluster_resources().get(resource, 0) > 0


def _platform_notes(spec: PipelineSpec, loop: LoopConfig, resource: str | None, present: bool) -> list[str]:
    """Where the candidate runs, and what its kernel table could not rebuild, for the result's notes."""
    platform = spec.platform
    notes = []
    if not present:
        notes.append(
            f"no {platform.device_type} device in the Ray cluster (no {resource!r} resource): the candidate trains "
            f"on the host CPU, with gloo instead of {platform.distributed_backend}"
        )
    mode, table_notes = platform_mode(loop)
    if mode is not None:
        ops = mode.platform.kernels.ops()
        notes.append(
            f"the candidate trains under {platform.name}'s kernel table: "
            + (f"{len(ops)} vendor/plugin/adapted kernel(s) ({', '.join(ops[:8])}{' ...' if len(ops) > 8 else ''})")
            + (f", operator library of {mode.platform.library.sources}" if mode.platform.library is not None else "")
        )
    return notes + table_notes


def scaled_model(trial: TrialSpec, config: HFConfigDict) -> tuple[HFConfigDict, TokenData]:
    """The model step 5 trains (and step 6 serves when step 5 did not run): step 1's `config` scaled
    by `trial.scale`, with the trial tokenizer's vocabulary; and the tokenized data."""
    data = prepare_data(trial.dataset, TRIAL_VOCAB)
    scaled = scale_config(
        config, trial.scale, vocab_size=data.vocab_size, seq_len=trial.seq_len, eos_token_id=data.eos_token_id
    )
    return scaled, data


def run_trial(
    spec: PipelineSpec,
    model: ResolvedModel,
    *,
    checkpoint_uri: str,
    plan: TrialPlan | None = None,
    hooks: LoopHooks | None = None,
    max_failures: int = 2,
    progress: Progress | None = None,
    memory_estimate: MemoryPredictor | None = None,
    store_settings: StoreSettings | None = None,
    ray_address: str | None = None,
    resources_per_worker: dict[str, float] | None = None,
    log=None,
    adaptations: Sequence[Adaptation] = (),
) -> TrialResult:
    """Run step 5 for `spec` on step 1's `model` (see the module docstring). `hooks` go to the
    candidate's loop only (fault drills inject faults with them) and are named in the result's notes;
    `adaptations` are step 2's (`OperatorsResult.ops.adaptations`), applied to the candidate's kernels."""
    from day0.backends.local.ray import connect

    t0, say = time.time(), progress or (lambda msg: None)
    quiet_known_library_logs()  # the trial says its own progress; no library's bar
    plan, trial = plan or TrialPlan(), spec.trial
    notes: list[str] = []
    connect(ray_address or spec.cluster.address)
    cfg, data = scaled_model(trial, model.config)
    resource = accelerator_resource(spec.platform, spec.cluster)
    present = resource is None or _advertised(resource)
    ref_loop, cand_loop = _loops(spec, cfg, plan, notes, present, adapted_kernels(adaptations))
    notes += _platform_notes(spec, cand_loop, resource, present)
    common: _RunOptions = {
        "storage_uri": checkpoint_uri,
        "max_failures": max_failures,
        "log": log or event_log(),
        "store_settings": store_settings,
        "progress": say,
    }
    reference, ref_run = _reference(spec, ref_loop, data.tokens, common, notes, say)
    if hooks is not None:
        notes.append(f"fault drill: hooks were active in the candidate: {hooks.describe()}")
    say(
        f"candidate: {trial.steps} steps on {trial.workers} {spec.platform.name} worker(s), "
        f"{cand_loop.compute_dtype}, {plan.sharding}, recompute {plan.recompute}"
    )
    cand_run = run_training(
        cand_loop,
        data.tokens,
        name="candidate",
        workers=trial.workers,
        hooks=hooks,
        use_gpu=present and resource == "GPU",
        backend=spec.platform.distributed_backend if present else "gloo",
        resources_per_worker=resources_per_worker
        or (train_worker_resources(spec.platform, spec.cluster) if present else None),
        **common,
    )
    runs = ([summarize_run("reference", ref_run)] if ref_run else []) + [summarize_run("candidate", cand_run)]
    _raise_failed(runs, checkpoint_uri)
    candidate = _curve(
        f"candidate {spec.platform.name}-{cand_loop.compute_dtype} x{trial.workers}",
        spec.platform.name,
        cand_loop,
        trial.workers,
        cand_run,
    )
    alignment = compare_curves(
        reference.loss,
        candidate.loss,
        reference_grad_norm=reference.grad_norm,
        candidate_grad_norm=candidate.grad_norm,
        tolerance=trial.tolerance,
        noise=reference_noise(reference.loss, reference.grad_norm, trial.tolerance.warmup_steps)
        if trial.tolerance.noise_fraction
        else None,
    )
    estimate = memory_estimate(cfg, plan, cand_loop, trial.workers) if memory_estimate else None
    if plan.source != "default":
        notes.append(f"the candidate applies the {plan.source}: recompute {plan.recompute}, sharding {plan.sharding}")
    return TrialResult(
        model=model.source,
        scaled=_scaled_summary(cfg, data),
        scaled_config=cfg,
        dataset=data.dataset,
        seq_len=trial.seq_len,
        global_batch=cand_loop.global_batch,
        steps=trial.steps,
        reference=reference,
        candidate=candidate,
        alignment=alignment,
        runs=runs,
        recoveries=recoveries(cand_run.events),
        memory=_memory(cand_run, estimate, memory_estimate.source if memory_estimate else "none"),
        notes=notes,
        seconds=time.time() - t0,
    )
