"""The cost model against published training runs: each run's figures, its step time (quoted or derived
from the published throughput), and what the planner predicts under the published degrees and knobs.

Contract: pure. `PublishedRun` is one row of tests/data/planner/published_runs.yaml; `predict_run(run,
structure, hardware)` plans with the published degrees fixed (knobs the source does not state are
searched) and returns the chosen plan (`chosen`: a spec pinning its every knob reproduces it through
`day0 plan`) with its step time, MFU and memory beside the published figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from day0.core.precision import DType
from day0.planner.inputs import PlannerOptions, cluster_figures
from day0.planner.model import model_costs
from day0.planner.problem import PlanningProblem
from day0.planner.results import Plan
from day0.planner.search import plan_parallelism
from day0.planner.step_time import model_flops_per_step
from day0.spec.cluster import HardwareSpec
from day0.spec.pipeline import Precision, TrainingSpec
from day0.steps.parallel.config import SOFTWARE_PROFILES, ParallelConstraints, SoftwareName, SoftwareProfile

if TYPE_CHECKING:
    from day0.model.structure import ModelStructure

__all__ = [
    "HBM_FRACTION",
    "PublishedHardware",
    "PublishedRun",
    "RunPrediction",
    "fit_gemm_efficiency",
    "megatron_flops_per_step",
    "nemo_llama_flops_per_step",
    "predict_run",
    "published_step_seconds",
]

HBM_FRACTION = 0.85  # memory-bound kernels reach ~85% of the datasheet HBM bandwidth (STREAM-like copies)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PublishedHardware(_Model):
    device_type: Literal["cuda", "npu"] = "cuda"
    resource: str | None = Field(None, description="The Kubernetes resource of one accelerator (an NPU's).")
    memory_gib: float
    bf16_tflops: float
    fp8_tflops: float | None = None
    hbm_gbps: float
    intra_node_bandwidth_gbps: float
    inter_node_bandwidth_gbps: float

    def spec(self) -> HardwareSpec:
        return HardwareSpec(**self.model_dump(exclude={"hbm_gbps", "device_type", "resource"}))


class PublishedRun(_Model):
    id: str
    source: str
    model: str
    hardware: str
    accelerators: int
    per_node: int = 8
    host_memory_gib_per_node: float = 2048  # DGX-class nodes (Kimi K2 sec. 2.4: 2 TB per 8-GPU node)
    seq_len: int
    global_batch: int
    compute: DType = "bf16"
    degrees: dict[str, int]
    recompute: str | None = None
    zero_stage: int | None = None
    offload: str | None = None
    sequence_parallel: bool | None = None
    software: SoftwareName | None = Field(
        None,
        description="The training software's profile, where one describes it: its figures under the row's own "
        "`options`, and its step-time band's runs.",
    )
    miss: str | None = Field(None, description="Why the model misses this run by more than 20%, where it does.")
    ambiguous: str | None = Field(
        None,
        description="Why the source's figure for this run is in doubt (it printed conflicting figures for the "
        "same setup): validation reports such a run apart from its headline figures.",
    )
    options: dict[str, Any] = Field(default={})
    knobs: dict[str, int] = Field(
        default={},
        description="Published settings as printed: `micro_batch` and `vp` (virtual stages per rank) are "
        "pinned; others (ga, fsdp, etp) are recorded only.",
    )
    published: dict[str, float]
    derived: str | None = None
    flops: Literal["model", "megatron_recompute", "nemo_llama"] = Field(
        "model",
        description="What a published TFLOP/s counts: model FLOPs, Megatron's 96·B·s·l·h² form, or NeMo's Llama "
        "form (non-causal attention).",
    )


class RunPrediction(BaseModel):
    id: str
    published_step_s: float | None
    predicted_step_s: float | None
    error: float | None = Field(description="(predicted - published) / published")
    mfu: float | None
    memory_gib: float | None
    feasible: bool
    plan: str
    message: str
    chosen: Plan | None = Field(None, description="The plan the prediction is of (its degrees and knobs).")


def megatron_flops_per_step(s: ModelStructure, global_batch: int, seq: int) -> float:
    """Narayanan et al. 2021 eq. 3, FLOPs of one step with full recompute (what their TFLOP/s count):
    96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    b, layers, h, v = global_batch, s.num_layers, s.hidden_size, s.vocab_size
    return 96 * b * seq * layers * h**2 * (1 + seq / (6 * h) + v / (16 * layers * h))


def nemo_llama_flops_per_step(s: ModelStructure, global_batch: int, seq: int) -> float:
    """NVIDIA NeMo's model FLOPs of a dense Llama step (nemo/utils/flops_formulas.py llama2/llama3):
    B·s·l·h²·(12 + 12·g/a + 18·f/h + 12·s/h + 6·V/(l·h)); its attention term counts the full s x s scores, not
    the causal half the planner's model FLOPs count."""
    b, layers, h, v = global_batch, s.num_layers, s.hidden_size, s.vocab_size
    groups, heads, ffn = s.num_kv_heads, s.num_attention_heads, s.intermediate_size or 4 * h
    per_layer = 12 + 12 * groups / heads + 18 * ffn / h + 12 * seq / h + 6 * v / (layers * h)
    return b * seq * layers * h**2 * per_layer


def published_step_seconds(run: PublishedRun, s: ModelStructure) -> float | None:
    """The run's step time: quoted, or derived from its throughput (the derivation the data file states)."""
    p = run.published
    if "step_s" in p:
        return p["step_s"]
    if "tflops_per_gpu" in p and run.flops != "model":
        count = megatron_flops_per_step if run.flops == "megatron_recompute" else nemo_llama_flops_per_step
        return count(s, run.global_batch, run.seq_len) / (p["tflops_per_gpu"] * 1e12 * run.accelerators)
    if "tflops_per_gpu" in p:
        flops = model_flops_per_step(model_costs(s), run.global_batch, run.seq_len)
        return flops / (p["tflops_per_gpu"] * 1e12 * run.accelerators)
    if "tokens_per_s_per_gpu" in p:  # total tokens / (seconds x devices): NeMo, torchtitan, MindSpeed, FlagPerf
        return run.global_batch * run.seq_len / (p["tokens_per_s_per_gpu"] * run.accelerators)
    if "gpu_hours_per_trillion_tokens" in p:
        tokens = run.global_batch * run.seq_len
        return tokens * p["gpu_hours_per_trillion_tokens"] * 3600 / (1e12 * run.accelerators)
    return None


def run_options(run: PublishedRun, hw: PublishedHardware, software: SoftwareProfile | None = None) -> PlannerOptions:
    """The planner's options for a run: its software profile's figures (`software`, else the row's own profile)
    under what the row states, its stated knobs fixed, the rest searched, HBM from the datasheet."""
    sw = software or (SOFTWARE_PROFILES[run.software] if run.software else None)
    figures = sw.planner_figures() if sw else {}
    opts: dict[str, Any] = {**figures, "hbm_bandwidth_gbps": hw.hbm_gbps * HBM_FRACTION, **run.options}
    if sw:  # the profile's GEMM efficiencies over the datasheet's, a row's own over both
        gemm = run.options.get("gemm_efficiency", {})
        opts["gemm_efficiency"] = {**PlannerOptions().gemm_efficiency, **sw.gemm_efficiency, **gemm}
    if run.recompute:
        opts["recompute"] = [run.recompute]
    if run.zero_stage is not None:
        opts["zero_stages"] = [run.zero_stage]
    opts["offload"] = [run.offload or "none"]
    if run.sequence_parallel is not None:
        opts["sequence_parallel"] = run.sequence_parallel
    # the published setup's communication and schedule as the table gives them (unstated overlaps off, 1F1B):
    # what the run did, not what steps 3-4 would switch on
    fixed = ("tp_overlap", "ep_overlap", "dp_overlap", "dispatch_dtype", "fp8_activation_cache", "dualpipe")
    opts["pinned"] = dict.fromkeys(fixed, "the published run")
    return PlannerOptions.model_validate(opts)


def predict_run(
    run: PublishedRun, s: ModelStructure, hw: PublishedHardware, software: SoftwareProfile | None = None
) -> RunPrediction:
    """The planner's prediction of `run` under the published degrees, with `software`'s figures (default: the
    profile the row names)."""
    d = run.degrees
    constraints = ParallelConstraints(
        tensor_parallel=d.get("tp"),
        pipeline_parallel=d.get("pp"),
        expert_parallel=d.get("ep", 1 if s.moe is None else None),
        context_parallel=d.get("cp", 1),
        data_parallel=d.get("dp"),
        micro_batch=run.knobs.get("micro_batch"),
        virtual_pipeline_stages=run.knobs.get("vp") if d.get("pp", 1) > 1 else None,
    )
    training = TrainingSpec(
        seq_len=run.seq_len,
        global_batch=run.global_batch,
        micro_batch=1,
        precision=Precision(compute=run.compute, master_weights="fp32"),
    )
    cluster = cluster_figures(
        hw.spec(),
        run.accelerators,
        run.per_node,
        host_memory_gib_per_accelerator=run.host_memory_gib_per_node / run.per_node,
    )
    problem = PlanningProblem.of(s, cluster, training, constraints, run_options(run, hw, software))
    report = plan_parallelism(problem, find_min_accelerators=False)
    published = published_step_seconds(run, s)
    best = report.best
    if best is None:
        return RunPrediction(
            id=run.id,
            published_step_s=published,
            predicted_step_s=None,
            error=None,
            mfu=None,
            memory_gib=None,
            feasible=False,
            plan="",
            message=report.message,
        )
    step = best.time.step_s
    return RunPrediction(
        id=run.id,
        published_step_s=published,
        predicted_step_s=step,
        error=(step - published) / published if published else None,
        mfu=best.time.mfu,
        memory_gib=best.memory.total_bytes / 1024**3,
        feasible=True,
        plan=f"{best.parallel.micro_batch=} {best.parallel.virtual_pipeline_stages=} {best.memory_knobs}",
        message=report.message,
        chosen=best,
    )


def fit_gemm_efficiency(errors_at: Callable[[float], Sequence[float]], low: float = 0.3, high: float = 1.0) -> float:
    """The GEMM efficiency at which the median of `errors_at(efficiency)`, the signed step-time errors of a
    software's published runs computing in one dtype, is zero (to 0.005), searched by bisection over
    [low, high]: a higher efficiency predicts faster steps, so the errors fall as it rises. The median, not
    the mean, so that one run the model misses for another cause does not move the figure for the rest."""
    while high - low > 0.005:
        mid = (low + high) / 2
        low, high = (mid, high) if statistics.median(errors_at(mid)) > 0 else (low, mid)
    return round((low + high) / 2, 3)
