"""The training software's named profiles (`planner.software`, issue 39 item 4): what each framework
generation brings to the cost model, every figure with the source it is read from. Step 3's spec section
(`config.py`) names them; the planner reads the chosen one."""

from typing import Annotated, Literal

from pydantic import BaseModel, Field

__all__ = ["SOFTWARE_PROFILES", "CpKvExchange", "SoftwareName", "SoftwareProfile", "TokenDispatcher"]

TokenDispatcher = Literal["alltoall", "allgather", "flex"]
"""Megatron's MoE token dispatchers (--moe-token-dispatcher-type): 'alltoall' sends each token's top-k copies rank
to rank (NCCL all-to-all); 'flex' with DeepEP (--moe-enable-deepep) sends a token once to each node it reaches and
forwards the copies there over NVLink (DeepSeek-V3 sec. 3.2.2's kernels); 'allgather' gathers every EP peer's
tokens on each rank."""
CpKvExchange = Literal["ring", "allgather"]
"""How context parallelism exchanges K/V: a ring passing each block on while the attention runs, or one
all-gather before all but the first block (PyTorch's context_parallel under its 'allgather' rotate method)."""


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
    moe_grouped_gemm: bool = Field(
        True, description="Whether its MoE recipes run the routed experts as grouped GEMMs (else one expert at a time)."
    )
    moe_token_dispatcher: TokenDispatcher = Field("alltoall", description="The MoE token dispatcher its recipes run.")
    cp_kv_exchange: CpKvExchange = Field("ring", description="How its context parallelism exchanges K/V.")
    cp_kv_repeated: bool = Field(False, description="Whether that exchange carries K/V repeated to the query heads.")
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
            "moe_grouped_gemm": self.moe_grouped_gemm,
            "moe_token_dispatcher": self.moe_token_dispatcher,
            "cp_kv_exchange": self.cp_kv_exchange,
            "cp_kv_repeated": self.cp_kv_repeated,
        }


SoftwareName = Literal[
    "megatron-core-2025",
    "megatron-lm-2021",
    "megatron-deepspeed-2022",
    "torchtitan-fsdp2-2024",
    "fsdp-trainer-2024",
    "llm-foundry-2023",
    "mindspeed-2025",
]
_CUBLAS = (
    "torch.nn.Linear and torch._scaled_mm run cuBLAS/cuBLASLt, the kernels the planner's datasheet GEMM figures "
    "describe (day0.planner.inputs.PlannerOptions.gemm_efficiency: bf16 0.8, fp8 0.65); no figure of its own is "
    "published"
)
_NO_MOE = (
    "no MoE layers in its releases of the period: the planner's default (grouped GEMMs, all-to-all), which a spec "
    "writes over in planner:"
)
_NO_CP = "no context parallelism in its releases of the period: the planner's default (a ring of the K/V heads)"
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
            "cp_kv_exchange": "Transformer Engine's AttnFuncWithCP (transformer_engine/pytorch/attention.py): 'Split "
            "attention compute into multiple steps, and overlap current-step compute with next-step communication', "
            "peer-to-peer sends of the K/V heads (a ring)",
            "overlaps": "--tp-comm-overlap, --overlap-moe-expert-parallel-comm, --overlap-grad-reduce "
            "(megatron/training/arguments.py)",
            "grad_dtype": "megatron/training/arguments.py: fp32 main_grad under --bf16 unless --grad-reduce-in-bf16",
            "flash_attention": "Transformer Engine's fused attention (cuDNN / FlashAttention) in Megatron-Core",
            "attention_efficiency": "Transformer Engine picks cuDNN's fused attention on sm90; its attention notebook "
            "(NVIDIA/TransformerEngine docs/examples/attention/attention.ipynb at 88c0c914, TE 1.10, cuDNN 9.3, H100 "
            "80GB HBM3) prints 7.4875 ms forward + backward for b2 h32 d128 s8192 causal: 514 TFLOP/s on the "
            "FlashAttention count (causal forward 2·b·s²·h·d, backward 2.5x), 52% of the bf16 peak",
            "gemm_efficiency": _CUBLAS + " (Transformer Engine's FP8 GEMMs are cuBLASLt's); " + _NOT_FITTED,
            "zero_stages": "DDP (0), --use-distributed-optimizer (1), Megatron-FSDP optim_grads (2) and "
            "optim_grads_params (3)",
            "dualpipe": "megatron/core/pipeline_parallel/schedules.py: 1F1B and interleaved 1F1B, no DualPipe",
            "devices": "CUDA (Transformer Engine)",
            "moe_grouped_gemm": "NVIDIA's MoE recipes (Megatron-Bridge / NeMo performance configs, the table's "
            "Qwen3 and DeepSeek-V3 rows) set moe_grouped_gemm=True, as Megatron-Core's MoE README advises when a "
            "rank hosts several experts; Megatron's own flag default is off (megatron/training/arguments.py)",
            "moe_token_dispatcher": "the same recipes set 'alltoall' (Megatron-Bridge's H100 DeepSeek-V3 recipe "
            "'flex' with DeepEP); Megatron's flag default is 'allgather' (megatron/training/arguments.py); a spec "
            "writes either in planner.moe_token_dispatcher",
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
            "cp_kv_exchange": _NO_CP,
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
            "moe_grouped_gemm": _NO_MOE,
            "moe_token_dispatcher": _NO_MOE,
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
            "cp_kv_exchange": _NO_CP,
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
            "moe_grouped_gemm": _NO_MOE,
            "moe_token_dispatcher": _NO_MOE,
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
        cp_kv_exchange="allgather",
        cp_kv_repeated=True,
        sources={
            "cp_kv_exchange": "torchtitan config_manager.py at 9dec370 (the 2024-12 benchmark's): "
            "--experimental.context_parallel_rotate_method default 'allgather', 'all-gather all kv shards on ranks "
            "after the first sub-SDPA computation'; its Llama (models/llama/model.py) calls repeat_kv on K and V "
            "before F.scaled_dot_product_attention, where context_parallel exchanges them",
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
            "moe_grouped_gemm": _NO_MOE,
            "moe_token_dispatcher": _NO_MOE,
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
            "cp_kv_exchange": _NO_CP,
            "overlaps": "FSDP1's backward_prefetch / forward_prefetch overlap the gathers and reduce-scatters with "
            "compute; no tensor or expert parallelism to overlap (foundation-model-stack/fms-fsdp README: FSDP "
            "and HSDP only)",
            "grad_dtype": "FSDP1 MixedPrecision with reduce_dtype bfloat16 (fms-fsdp's bf16 policy): gradients are "
            "kept and reduced in bf16",
            "flash_attention": "fms-fsdp README: 'SDPA implementation of Flash attention v2'",
            "attention_efficiency": "Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608) abstract: FlashAttention-2 "
            "reaches 35% of the H100's peak",
            "gemm_efficiency": _CUBLAS + "; bf16 only (fms-fsdp trains in bf16); no table run of this software to fit "
            "on (LLM Foundry's, an FSDP1 trainer too, has its own profile for its Triton attention)",
            "zero_stages": "torch.distributed.fsdp.ShardingStrategy: NO_SHARD (0), SHARD_GRAD_OP (2), FULL_SHARD "
            "and HYBRID_SHARD (3); no optimizer-only sharding",
            "dualpipe": "no pipeline parallelism",
            "devices": "CUDA (fms-fsdp README: 128 A100)",
            "moe_grouped_gemm": _NO_MOE,
            "moe_token_dispatcher": _NO_MOE,
        },
    ),
    "llm-foundry-2023": SoftwareProfile(
        framework="MosaicML LLM Foundry / Composer (FSDP1, Triton FlashAttention), 2023",
        devices=("cuda",),
        grad_dtype="fp32",
        flash_attention=True,
        attention_efficiency=0.175,
        gemm_efficiency={"bf16": 0.8},
        zero_stages=(0, 2, 3),
        overlaps=("dp",),
        sources={
            "cp_kv_exchange": _NO_CP,
            "overlaps": "Composer's FSDP1 backward and forward prefetch overlap the gathers and reduce-scatters with "
            "compute; no tensor or expert parallelism",
            "grad_dtype": "Composer's FSDP mixed precision 'DEFAULT' (composer/trainer/mosaic_fsdp_utils.py, v0.16): "
            "param_dtype and buffer_dtype only, no reduce_dtype, so gradients are reduced and kept in the fp32 "
            "sharded parameters' dtype (the MPT table's 'MP Mode' column: DEFAULT)",
            "flash_attention": "the MPT yamls' attn_impl 'triton' (scripts/train/benchmarking/submit_benchmarks.py "
            "default): llmfoundry/models/layers/flash_attn_triton.py, FlashAttention in pre-MLIR Triton",
            "attention_efficiency": "FlashAttention-2 reaches 35% of the H100's peak (Shah et al. 2024, "
            "FlashAttention-3, arXiv:2407.08608, abstract) and is 'around 2x faster than FlashAttention' (Dao 2023, "
            "arXiv:2307.08691, sec. 4.1); the Triton kernel's own docstring (flash_attn_triton.py, copied from "
            "HazyResearch/flash-attention@eff9fe6): 'Overall Triton forward + backward is slightly slower than CUDA "
            "forward + backward' (FlashAttention's): 0.35 / 2",
            "gemm_efficiency": _CUBLAS + "; the H100 rows ran the image mosaicml/pytorch:2.1.0_cu121-nightly20230827 "
            "(the rows' source file scripts/train/benchmarking/h100new.md, Image column; CUDA 12.1, Hopper kernels); "
            "not fitted: the table's runs of this software are one source, which validation holds out whole",
            "zero_stages": "torch.distributed.fsdp.ShardingStrategy through Composer: NO_SHARD (0), SHARD_GRAD_OP (2), "
            "FULL_SHARD and HYBRID_SHARD (3)",
            "dualpipe": "no pipeline parallelism",
            "devices": "CUDA (the MPT benchmark tables: A100 and H100)",
            "moe_grouped_gemm": _NO_MOE,
            "moe_token_dispatcher": _NO_MOE,
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
        moe_grouped_gemm=False,
        moe_token_dispatcher="allgather",
        sources={
            "cp_kv_exchange": "--context-parallel-algo megatron_cp_algo (the table's 128K and Mixtral scripts): "
            "MindSpeed's ring attention, K/V blocks passed on while the attention runs",
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
            "moe_grouped_gemm": "MindSpeed-LLM's MoE example scripts of the table (examples/mcore/mixtral/"
            "pretrain_mixtral_8x7b_ptd.sh, examples/mcore/deepseek2_lite/pretrain_deepseek2_lite_16b_ptd_8p.sh at "
            "1ea39226) pass no --moe-grouped-gemm, whose Megatron default is off: SequentialMLP",
            "moe_token_dispatcher": "the DeepSeek-V2-Lite script writes --moe-token-dispatcher-type allgather and the "
            "Mixtral script none, Megatron's default being 'allgather' (megatron/training/arguments.py); MindSpeed's "
            "--moe-permutation-async-comm optimises that branch (Ascend/MindSpeed docs/features/megatron_moe/"
            "megatron-moe-allgather-dispatcher.md)",
        },
    ),
}
"""Named software profiles (issue 39, item 4): the planner's own defaults are Megatron-Core 2025's."""
