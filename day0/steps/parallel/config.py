"""Steps 3-4's sections of the spec: the cost model's assumptions (`planner:`), and the degrees and knobs
a plan may pin (`parallel:`, `ParallelConstraints`: its degrees beside `ParallelKnobs`).

Contract: `UserModel` rules (`day0.spec.base`); every figure within a bound named in its description. A
knob left out (None) is searched (steps 3-4 choose it); a knob written is kept exactly, and where another
value would be better the plan says so beside it. Contradictions between knobs, and knobs the model
cannot have (recompute modules it lacks), are refused by `day0.spec.checks.check_parallel`, naming both
fields.
"""

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, Field

from day0.core.recompute import Recompute
from day0.spec.base import HBM_GBPS, MAX_ACCELERATORS, UserModel

__all__ = [
    "SOFTWARE_PROFILES",
    "Fp8Pin",
    "OverlapPin",
    "ParallelConstraints",
    "ParallelKnobs",
    "PlannerOverlap",
    "PlannerSpec",
    "RecomputeModule",
    "RecomputePin",
    "SearchChoices",
    "SoftwareName",
    "SoftwareProfile",
]


class PlannerOverlap(UserModel):
    """Which communication the cost model hides behind compute (step 4 may switch them on where they pay)."""

    tp: bool = Field(False, description="TP all-gather/reduce-scatter overlapped with GEMMs (default false).")
    ep: bool = Field(False, description="MoE all-to-all overlapped with another micro-batch (default false).")
    dp: bool = Field(True, description="Gradient reduction overlapped with the last backward (default true).")


RecomputeModule = Literal["core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp_act"]
OffloadPin = Literal["none", "optimizer", "activations", "optimizer+activations"]


class SearchChoices(BaseModel):
    """What the planner searches and assumes that a spec's `planner:` section may set: declared once,
    here, and shared by `PlannerSpec` and the cost model's `day0.planner.inputs.PlannerOptions`."""

    max_context_parallel: int = Field(8, ge=1, le=1024, description="Largest CP degree searched (default 8).")
    max_virtual_stages: int = Field(4, ge=1, le=64, description="Most virtual pipeline stages searched (default 4).")
    sequence_parallel: bool = Field(True, description="Megatron sequence parallelism with TP (default true).")
    flash_attention: bool = Field(True, description="Attention scores are never stored (default true).")
    fp8_activation_cache: bool = Field(
        False, description="With fp8 compute, cache GEMM inputs in FP8 (DeepSeek-V3 style; default false)."
    )
    dualpipe: bool = Field(False, description="Plan for DualPipe: half the bubble, two weight copies (default false).")
    expert_max_nodes: int | None = Field(
        None,
        ge=1,
        le=MAX_ACCELERATORS,
        description="Node-limited MoE routing: nodes a token may reach (default unlimited).",
    )
    dropout: bool = Field(False, description="The model trains with dropout: 1-byte masks are stored (default false).")
    optimizer_state_dtype: Literal["fp32", "bf16"] = Field(
        "fp32", description="Dtype of the Adam moments (DeepSeek-V3 keeps them in bf16; default fp32)."
    )
    grad_dtype: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="Dtype gradients are accumulated, kept and reduced in (Megatron's main_grad buffer: bf16 with "
        "--grad-reduce-in-bf16, i.e. Megatron-Core's grad_reduce_in_fp32 off; default fp32, as Megatron-LM's and "
        "torchtitan's defaults: day0.planner.frameworks.GRAD_DTYPE_DEFAULTS cites them; NVIDIA's FP8 perf recipes "
        "set bf16).",
    )
    mtp_layers: int = Field(
        0, ge=0, le=16, description="Multi-token-prediction modules trained along (DeepSeek-V3: 1; default 0)."
    )


class SoftwareProfile(BaseModel):
    """What a framework generation brings to the cost model, each figure with the source it is read from:
    the gradient buffer it keeps, whether its attention stores the scores, the fraction of the bf16 peak its
    attention kernels reach, the fraction of each compute dtype's peak its GEMMs reach (the dtypes it trains
    in), the ZeRO stages, the communication overlaps, DualPipe if it has it, and the devices it runs on.
    `planner.software` selects one; a figure the spec writes in `planner:` wins over it, and a calibrated
    profile's measurements over both (`planner_inputs`). Every figure is cited; none is fitted on the published
    table: a fit of the GEMM efficiencies on each software's runs (`day0.planner.published.fit_gemm_efficiency`)
    predicts held-out sources worse than the cited figures (benchmarks/bench_planner.py measures both)."""

    framework: str
    devices: tuple[Literal["cuda", "npu"], ...] = Field(description="Accelerator kinds the software runs on.")
    grad_dtype: Literal["fp32", "bf16"]
    flash_attention: bool
    attention_efficiency: float = Field(gt=0, le=1)
    gemm_efficiency: dict[Literal["bf16", "fp8"], Annotated[float, Field(gt=0, le=1)]] = Field(
        description="Fraction of each compute dtype's peak large GEMMs reach under this software; a dtype absent "
        "is one the software does not train in."
    )
    zero_stages: tuple[int, ...]
    overlaps: tuple[Literal["tp", "ep", "dp"], ...]
    dualpipe: bool = Field(False, description="Whether it has DeepSeek's DualPipe schedule (searched where it does).")
    sources: dict[str, str] = Field(description="Per figure above, where it is read.")

    def planner_figures(self) -> dict[str, object]:
        """The cost model's options this profile sets (`PlannerOptions` names)."""
        return {
            "grad_dtype": self.grad_dtype,
            "flash_attention": self.flash_attention,
            "attention_efficiency": self.attention_efficiency,
            "gemm_efficiency": dict(self.gemm_efficiency),
            "zero_stages": list(self.zero_stages),
            "software_overlaps": list(self.overlaps),
            "software_dualpipe": self.dualpipe,
        }


SoftwareName = Literal[
    "megatron-core-2025",
    "megatron-lm-2021",
    "megatron-deepspeed-2022",
    "torchtitan-fsdp2-2024",
    "fsdp-trainer-2024",
    "mindspeed-2025",
]
_CUBLAS = (
    "torch.nn.Linear and torch._scaled_mm run cuBLAS/cuBLASLt, the kernels the planner's datasheet GEMM figures "
    "describe (day0.planner.inputs.PlannerOptions.gemm_efficiency: bf16 0.8, fp8 0.65); no figure of its own is "
    "published"
)
_NOT_FITTED = (
    "a fit on this software's runs of the published table (day0.planner.published.fit_gemm_efficiency) was "
    "measured and not taken: refitted without each source in turn it predicts the held-out sources worse than "
    "this figure (benchmarks/bench_planner.py, leave_one_source_out_fitted)"
)
SOFTWARE_PROFILES: dict[str, SoftwareProfile] = {
    "megatron-core-2025": SoftwareProfile(
        framework="Megatron-Core",
        devices=("cuda",),
        grad_dtype="fp32",
        flash_attention=True,
        attention_efficiency=0.5,
        gemm_efficiency={"bf16": 0.8, "fp8": 0.65},
        zero_stages=(0, 1, 2, 3),
        overlaps=("tp", "ep", "dp"),
        sources={
            "overlaps": "--tp-comm-overlap, --overlap-moe-expert-parallel-comm, --overlap-grad-reduce "
            "(megatron/training/arguments.py)",
            "grad_dtype": "megatron/training/arguments.py: fp32 main_grad under --bf16 unless --grad-reduce-in-bf16",
            "flash_attention": "Transformer Engine's fused attention (cuDNN / FlashAttention) in Megatron-Core",
            "attention_efficiency": "Dao 2023 (FlashAttention-2, arXiv:2307.08691): 50-73% of the A100 peak",
            "gemm_efficiency": _CUBLAS + " (Transformer Engine's FP8 GEMMs are cuBLASLt's); " + _NOT_FITTED,
            "zero_stages": "DDP (0), --use-distributed-optimizer (1), Megatron-FSDP optim_grads (2) and "
            "optim_grads_params (3)",
            "dualpipe": "megatron/core/pipeline_parallel/schedules.py: 1F1B and interleaved 1F1B, no DualPipe",
            "devices": "CUDA (Transformer Engine)",
        },
    ),
    "megatron-lm-2021": SoftwareProfile(
        framework="Megatron-LM (2021-22)",
        devices=("cuda",),
        grad_dtype="fp32",
        flash_attention=False,
        attention_efficiency=0.5,
        gemm_efficiency={"bf16": 0.8},
        zero_stages=(0,),
        overlaps=("dp",),
        sources={
            "overlaps": "TP collectives overlap GEMMs only since Transformer Engine's userbuffers "
            "(NVIDIA/TransformerEngine#147, April 2023, TE 0.8); no MoE; the gradient all-reduce overlaps the "
            "backward as PyTorch DDP's does (Li et al. 2020, VLDB)",
            "grad_dtype": "megatron/arguments.py of the 2021-22 releases: --bf16 sets "
            "accumulate_allreduce_grads_in_fp32 (fp32 main_grad)",
            "flash_attention": "FlashAttention appeared in May 2022 (Dao et al., arXiv:2205.14135); Korthikanti et "
            "al. 2022 eq. 2 counts the stored 5·a·s/h attention scores",
            "attention_efficiency": "unused without FlashAttention: the scores' batched GEMMs are timed on the "
            "roofline",
            "gemm_efficiency": _CUBLAS
            + "; bf16 only: FP8 training came with Transformer Engine on Hopper (2022-23); "
            + _NOT_FITTED,
            "zero_stages": "Narayanan et al. 2021: plain data parallelism (gradients all-reduced), no ZeRO",
            "dualpipe": "DualPipe appeared with DeepSeek-V3 (arXiv:2412.19437, December 2024)",
            "devices": "CUDA (Narayanan et al. 2021: A100 clusters)",
        },
    ),
    "megatron-deepspeed-2022": SoftwareProfile(
        framework="Megatron-DeepSpeed (2021-22)",
        devices=("cuda",),
        grad_dtype="fp32",
        flash_attention=False,
        attention_efficiency=0.5,
        gemm_efficiency={"bf16": 0.8},
        zero_stages=(0, 1),
        overlaps=("dp",),
        sources={
            "overlaps": "Megatron-LM 2021's (its fork): TP collectives not overlapped, gradient reduction with the "
            "backward",
            "grad_dtype": "DeepSpeed's bf16 optimizer keeps fp32 gradient accumulation (BLOOM: Le Scao et al. 2022, "
            "arXiv:2211.05100, sec. 3.4, bf16 mixed precision with fp32 master weights and gradients)",
            "flash_attention": "BLOOM and MT-NLG (Smith et al. 2022, arXiv:2201.11990) predate FlashAttention's "
            "release (May 2022) and store the attention scores (fused softmax kernels)",
            "attention_efficiency": "unused without FlashAttention",
            "gemm_efficiency": "Megatron-LM's GEMM code (Megatron-DeepSpeed is its fork); " + _CUBLAS + "; no "
            "table run of this software to fit on yet",
            "zero_stages": "DeepSpeed's pipeline engine takes ZeRO stage 1 beside pipeline parallelism, not 2 or 3 "
            "(BLOOM sec. 3.4: ZeRO stage 1 with TP and PP); 0 without it",
            "dualpipe": "DualPipe appeared with DeepSeek-V3 (arXiv:2412.19437, December 2024)",
            "devices": "CUDA (BLOOM: 384 A100 80GB)",
        },
    ),
    "torchtitan-fsdp2-2024": SoftwareProfile(
        framework="torchtitan (FSDP2)",
        devices=("cuda",),
        grad_dtype="fp32",
        flash_attention=True,
        attention_efficiency=0.35,
        gemm_efficiency={"bf16": 0.8, "fp8": 0.65},
        zero_stages=(0, 2, 3),
        overlaps=("tp", "dp"),
        sources={
            "overlaps": "async TP (enable_async_tensor_parallel, the 2024-12 benchmark's table 4) and FSDP2's "
            "prefetch; no MoE all-to-all overlap in its 2024 releases (dense Llama only)",
            "grad_dtype": "torchtitan [training] mixed_precision_reduce 'float32' (FSDP2 reduce_dtype); sharded "
            "gradients in the fp32 sharded parameters' dtype",
            "flash_attention": "PyTorch SDPA's FlashAttention-2 kernels",
            "attention_efficiency": "Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608) abstract: FlashAttention-2 "
            "reaches 35% of the H100's peak",
            "gemm_efficiency": _CUBLAS + " (float8 through torchao's Float8Linear, torch._scaled_mm); not fitted: "
            "the table's torchtitan runs are one source, which validation holds out whole",
            "zero_stages": "FSDP2 replicate (0), reshard_after_forward never (2) or default (3); no ZeRO-1",
            "dualpipe": "DualPipe appeared with DeepSeek-V3 (arXiv:2412.19437, December 2024), after these releases",
            "devices": "CUDA (the 2024-12 benchmark: H100)",
        },
    ),
    "fsdp-trainer-2024": SoftwareProfile(
        framework="PyTorch FSDP1 trainers (IBM fms-fsdp, HF accelerate)",
        devices=("cuda",),
        grad_dtype="bf16",
        flash_attention=True,
        attention_efficiency=0.35,
        gemm_efficiency={"bf16": 0.8},
        zero_stages=(0, 2, 3),
        overlaps=("dp",),
        sources={
            "overlaps": "FSDP1's backward_prefetch / forward_prefetch overlap the gathers and reduce-scatters with "
            "compute; no tensor or expert parallelism to overlap (foundation-model-stack/fms-fsdp README: FSDP "
            "and HSDP only)",
            "grad_dtype": "FSDP1 MixedPrecision with reduce_dtype bfloat16 (fms-fsdp's bf16 policy): gradients are "
            "kept and reduced in bf16",
            "flash_attention": "fms-fsdp README: 'SDPA implementation of Flash attention v2'",
            "attention_efficiency": "Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608) abstract: FlashAttention-2 "
            "reaches 35% of the H100's peak",
            "gemm_efficiency": _CUBLAS + "; bf16 only (fms-fsdp trains in bf16); no table run of this software to "
            "fit on yet",
            "zero_stages": "torch.distributed.fsdp.ShardingStrategy: NO_SHARD (0), SHARD_GRAD_OP (2), FULL_SHARD "
            "and HYBRID_SHARD (3); no optimizer-only sharding",
            "dualpipe": "no pipeline parallelism",
            "devices": "CUDA (fms-fsdp README: 128 A100)",
        },
    ),
    "mindspeed-2025": SoftwareProfile(
        framework="MindSpeed / MindSpeed-LLM (Megatron-Core on Ascend)",
        devices=("npu",),
        grad_dtype="fp32",
        flash_attention=True,
        attention_efficiency=0.5,
        gemm_efficiency={"bf16": 0.8},
        zero_stages=(0, 1),
        overlaps=("tp", "ep", "dp"),
        dualpipe=True,
        sources={
            "overlaps": "--use-mc2 (matmul fused with the TP all-gather / reduce-scatter, the table's Mixtral "
            "script), --moe-alltoall-overlap-comm (Ascend/MindSpeed docs/features/megatron_moe/"
            "megatron-moe-alltoall-overlap-comm.md; needs --moe-grouped-gemm, torch_npu.npu_grouped_matmul), "
            "--overlap-grad-reduce / --overlap-param-gather (Megatron's)",
            "grad_dtype": "Megatron-Core's arguments, which MindSpeed patches but keeps: fp32 main_grad under --bf16 "
            "unless --grad-reduce-in-bf16",
            "flash_attention": "--use-flash-attn: torch_npu.npu_fusion_attention",
            "attention_efficiency": "no published fraction for npu_fusion_attention: Megatron-Core's FlashAttention "
            "figure",
            "gemm_efficiency": "no published Ascend GEMM fraction of peak: the planner's datasheet bf16 figure (the "
            "910B has no FP8); not fitted: the table's MindSpeed runs are one source, which validation holds out "
            "whole",
            "zero_stages": "--use-distributed-optimizer (1) or plain DDP (0), Megatron's; the MindSpeed-LLM scripts "
            "of the table use the former",
            "dualpipe": "--schedules-method dualpipev (Ascend/MindSpeed mindspeed/features_manager DualpipeVFeature)",
            "devices": "Ascend NPUs through torch_npu (hccl)",
        },
    ),
}
"""Named software profiles (issue 39, item 4): the planner's own defaults are Megatron-Core 2025's."""


class PlannerSpec(UserModel, SearchChoices):
    """Steps 3-4's cost-model assumptions. Unset figures come from the platform's calibrated profile when
    the store holds one (`day0 calibrate PLATFORM`), else from the datasheet defaults named below."""

    calibrate: bool = Field(
        False,
        description="Run `day0 calibrate` on the run's backend before step 3 (its profile is then used); "
        "default false: use a stored profile if any.",
    )
    software: SoftwareName | None = Field(
        None,
        description="The training software's profile (SOFTWARE_PROFILES: gradient buffer, attention kernels, ZeRO "
        "stages, each cited); default: the planner's own figures, Megatron-Core 2025's. Figures written here win.",
    )
    profile: Literal["auto", "datasheet", "calibrated"] = Field(
        "auto",
        description="'auto': the calibrated profile if the store has one, else datasheet figures; 'calibrated' "
        "requires it.",
    )
    gemm_efficiency: dict[Literal["fp32", "bf16", "fp16", "fp8"], Annotated[float, Field(gt=0, le=1)]] = Field(
        default={},
        description="Fraction of each dtype's peak large GEMMs reach (datasheet defaults: bf16 0.8, fp8 0.65).",
    )
    attention_efficiency: float | None = Field(
        None, gt=0, le=1, description="FlashAttention fraction of the bf16 peak (default 0.5)."
    )
    hbm_bandwidth_gbps: float | None = Field(
        None,
        ge=HBM_GBPS[0],
        le=HBM_GBPS[1],
        description="Achieved device memory bandwidth, GB/s (default 3000, or calibrated); from 1 GB/s (below any "
        "DRAM) to 100 TB/s (an H200's HBM gives 4.8 TB/s).",
    )
    selective_recompute: list[RecomputeModule] = Field(
        default_factory=lambda: list(get_args(RecomputeModule)),
        description="What selective recompute recomputes (Megatron-Core recompute modules; default all five).",
    )
    overlap: PlannerOverlap = Field(default_factory=PlannerOverlap, description="Communication overlap switches.")


class RecomputePin(UserModel):
    """Activation recompute as Megatron-Core names it (`--recompute-granularity`, `--recompute-modules`,
    `--recompute-method`, `--recompute-num-layers`)."""

    granularity: Recompute = Field(description="none, selective (the modules below) or full (whole layers).")
    modules: list[RecomputeModule] | None = Field(
        None,
        description="selective only: what is recomputed (Megatron-Core recompute modules; default: "
        "planner.selective_recompute).",
    )
    method: Literal["uniform", "block"] | None = Field(
        None,
        description="full only: 'uniform' checkpoints every group of num_layers layers, 'block' recomputes "
        "the first num_layers of each pipeline chunk (default uniform).",
    )
    num_layers: int | None = Field(
        None, ge=1, le=1024, description="full only: layers per checkpointed group (uniform) or per chunk (block)."
    )


class Fp8Pin(UserModel):
    """The FP8 recipe (Transformer Engine's, as Megatron names it: `--fp8-format`, `--fp8-recipe`);
    it needs `training.precision.compute: fp8`."""

    recipe: Literal["delayed", "tensorwise", "blockwise", "mxfp8"] = Field(
        "blockwise",
        description="Scaling recipe: delayed or tensorwise (per tensor), blockwise (DeepSeek-V3's 1x128 / "
        "128x128 tiles), mxfp8 (Blackwell); default blockwise.",
    )
    format: Literal["e4m3", "hybrid"] = Field(
        "hybrid", description="e4m3 everywhere, or hybrid: e5m2 for output gradients (default hybrid)."
    )
    activation_cache: bool | None = Field(
        None, description="Cache GEMM inputs in FP8 (default: planner.fp8_activation_cache)."
    )
    dispatch: bool | None = Field(None, description="MoE dispatch all-to-all in FP8 (default: step 4 decides).")


class OverlapPin(UserModel):
    """Communication overlap pinned on or off (unset: step 4 switches it on where it pays)."""

    tp: bool | None = Field(None, description="TP collectives overlapped with GEMMs (Megatron --tp-comm-overlap).")
    ep: bool | None = Field(
        None, description="MoE all-to-all overlapped with another micro-batch (--overlap-moe-expert-parallel-comm)."
    )
    dp: bool | None = Field(
        None, description="Gradient reduction and parameter gather overlapped (--overlap-grad-reduce/-param-gather)."
    )


class ParallelKnobs(UserModel):
    """What `parallel:` may pin besides the degrees (unset: searched). A spec pinning every degree and
    every knob makes `day0 plan` evaluate exactly that plan, or say which term does not fit and by how much."""

    expert_tensor_parallel: int | None = Field(
        None, ge=1, le=MAX_ACCELERATORS, description="Fixed expert-tensor-parallel degree (1 or the TP degree)."
    )
    virtual_pipeline_stages: int | None = Field(
        None, ge=1, le=64, description="Fixed virtual pipeline stages per rank (interleaved 1F1B; needs PP > 1)."
    )
    micro_batch: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Fixed micro-batch, sequences (as a written training.micro_batch is; at most a million).",
    )
    recompute: Recompute | RecomputePin | None = Field(
        None, description="Fixed activation recompute: none, selective, full, or a mapping with its details."
    )
    zero_stage: int | None = Field(None, ge=0, le=3, description="Fixed ZeRO stage, 0-3.")
    distributed_optimizer: bool | None = Field(
        None, description="Megatron's distributed optimizer (optimizer states sharded: ZeRO-1)."
    )
    offload: OffloadPin | None = Field(None, description="Fixed CPU offload: none, optimizer, activations or both.")
    sequence_parallel: bool | None = Field(
        None, description="Megatron sequence parallelism with TP (default: planner.sequence_parallel)."
    )
    dualpipe: bool | None = Field(None, description="The DualPipe schedule (needs an even PP, no virtual stages).")
    fp8: Fp8Pin | None = Field(None, description="The FP8 recipe (needs training.precision.compute: fp8).")
    overlap: OverlapPin = Field(default_factory=OverlapPin, description="Communication overlap pinned on or off.")
    grad_reduce_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="Gradient reduction dtype (Megatron --grad-reduce-in-bf16 for bf16; default: step 4)."
    )

    def recompute_pin(self) -> RecomputePin | None:
        """`recompute` as a `RecomputePin` (a bare granularity becomes one with its defaults)."""
        if isinstance(self.recompute, str):
            return RecomputePin(granularity=self.recompute)
        return self.recompute


class ParallelConstraints(ParallelKnobs):
    """Degrees are bounded by the largest cluster day0 plans for (`MAX_ACCELERATORS`, 2^20); the knobs
    that may be pinned beside them are `ParallelKnobs`'."""

    tensor_parallel: int | None = Field(None, ge=1, le=MAX_ACCELERATORS, description="Fixed tensor-parallel degree.")
    pipeline_parallel: int | None = Field(
        None, ge=1, le=MAX_ACCELERATORS, description="Fixed pipeline-parallel degree."
    )
    expert_parallel: int | None = Field(None, ge=1, le=MAX_ACCELERATORS, description="Fixed expert-parallel degree.")
    context_parallel: int | None = Field(None, ge=1, le=MAX_ACCELERATORS, description="Fixed context-parallel degree.")
    data_parallel: int | None = Field(None, ge=1, le=MAX_ACCELERATORS, description="Fixed data-parallel degree.")
    max_pipeline_parallel: int | None = Field(
        None, ge=1, le=MAX_ACCELERATORS, description="Largest pipeline-parallel degree the search may pick."
    )
    accelerators: int | None = Field(
        None, ge=1, le=MAX_ACCELERATORS, description="Use this many accelerators (default: all)."
    )
