"""Steps 3-4's section of the spec: the cost model's assumptions (`day0.spec` re-exports it).

Contract: `UserModel` rules (`day0.spec_base`); every figure within a bound named in its description.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field

from day0.spec_base import HBM_GBPS, MAX_ACCELERATORS, UserModel

__all__ = ["PlannerOverlap", "PlannerSpec", "RecomputeModule"]


class PlannerOverlap(UserModel):
    """Which communication the cost model hides behind compute (step 4 may switch them on where they pay)."""

    tp: bool = Field(False, description="TP all-gather/reduce-scatter overlapped with GEMMs (default false).")
    ep: bool = Field(False, description="MoE all-to-all overlapped with another micro-batch (default false).")
    dp: bool = Field(True, description="Gradient reduction overlapped with the last backward (default true).")


RecomputeModule = Literal["core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp_act"]


class PlannerSpec(UserModel):
    """Steps 3-4's cost-model assumptions. Unset figures come from the platform's calibrated profile when
    the store holds one (`day0 calibrate PLATFORM`), else from the datasheet defaults named below."""

    calibrate: bool = Field(
        False,
        description="Run `day0 calibrate` on the run's backend before step 3 (its profile is then used); "
        "default false: use a stored profile if any.",
    )
    profile: Literal["auto", "datasheet", "calibrated"] = Field(
        "auto",
        description="'auto': the calibrated profile if the store has one, else datasheet figures; 'calibrated' "
        "requires it.",
    )
    gemm_efficiency: dict[Literal["fp32", "bf16", "fp16", "fp8"], Annotated[float, Field(gt=0, le=1)]] = Field(
        default_factory=dict,
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
    max_context_parallel: int = Field(8, ge=1, le=1024, description="Largest CP degree searched (default 8).")
    max_virtual_stages: int = Field(4, ge=1, le=64, description="Most virtual pipeline stages searched (default 4).")
    sequence_parallel: bool = Field(True, description="Megatron sequence parallelism with TP (default true).")
    flash_attention: bool = Field(True, description="Attention scores are never stored (default true).")
    fp8_activation_cache: bool = Field(
        False, description="With fp8 compute, cache GEMM inputs in FP8 (DeepSeek-V3 style; default false)."
    )
    selective_recompute: list[RecomputeModule] = Field(
        default_factory=lambda: list(get_args(RecomputeModule)),
        description="What selective recompute recomputes (Megatron-Core recompute modules; default all five).",
    )
    dualpipe: bool = Field(False, description="Plan for DualPipe: half the bubble, two weight copies (default false).")
    expert_max_nodes: int | None = Field(
        None,
        ge=1,
        le=MAX_ACCELERATORS,
        description="Node-limited MoE routing: nodes a token may reach (default unlimited).",
    )
    overlap: PlannerOverlap = Field(default_factory=PlannerOverlap, description="Communication overlap switches.")
