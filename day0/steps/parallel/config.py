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
from day0.steps.parallel.config_software import (
    SOFTWARE_PROFILES,
    CpKvExchange,
    SoftwareName,
    SoftwareProfile,
    TokenDispatcher,
)

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
        description="Node-limited MoE routing: nodes a token may reach (default unlimited); it cuts the NIC traffic "
        "with the flex (DeepEP) dispatcher, which sends a token once per node.",
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
    moe_grouped_gemm: bool = Field(
        True,
        description="Routed experts run as grouped GEMMs (Megatron --moe-grouped-gemm); false: Megatron-Core's "
        "SequentialMLP, each local expert's GEMMs in turn, kernels of their own (default true; planner.software "
        "sets its framework's).",
    )
    moe_routing: Literal["dropless", "balanced"] = Field(
        "balanced",
        description="MoE routing as the run trains it: 'balanced' plans for experts evenly loaded (forced balance, "
        "--moe-router-force-load-balancing, as NVIDIA's benchmarks run, or a capacity factor of 1); 'dropless' "
        "(Megatron's routing without a capacity factor) leaves the busiest expert-parallel rank more tokens than the "
        "mean (day0.planner.inputs.DROPLESS_EXPERT_LOAD, measured on a trained router), which EP1 avoids (default "
        "balanced: write dropless for a run whose router is not forced to balance).",
    )
    moe_token_dispatcher: TokenDispatcher = Field(
        "alltoall",
        description="MoE token dispatcher (Megatron --moe-token-dispatcher-type): 'alltoall' sends each token's "
        "top-k copies to their experts' ranks, over the NIC wherever the expert is on another node; 'flex' (DeepEP) "
        "sends a token once to each node it reaches and forwards it there over NVLink, which is what makes "
        "expert_max_nodes save NIC traffic; 'allgather' gathers every EP peer's tokens on each rank and "
        "reduce-scatters the outputs (default alltoall; planner.software sets its framework's).",
    )
    cp_kv_exchange: CpKvExchange = Field(
        "ring",
        description="How context parallelism exchanges K/V: 'ring' passes each block on while the attention of the "
        "one before runs (Megatron / Transformer Engine, ring attention); 'allgather' gathers every rank's K/V "
        "after the first block's attention and before the rest, so each forward waits for it (PyTorch's "
        "context_parallel under torchtitan's default rotate method) (default ring; planner.software sets its "
        "framework's).",
    )
    cp_kv_repeated: bool = Field(
        False,
        description="Context parallelism exchanges K/V after grouped-query attention repeats them to the query "
        "heads (torchtitan's Llama repeats them before SDPA, where context_parallel hooks in), not the K/V heads "
        "(default false; planner.software sets its framework's).",
    )


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
