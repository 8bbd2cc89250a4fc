"""Planner inputs: the cluster's figures, the planner's assumptions, and the search space.

Contract: everything here is pure data (no torch). `cluster_from_spec` turns a `PipelineSpec`'s node
pools and platform figures into one homogeneous `ClusterFigures` (the largest group of identical
pools; the others are named in `notes`). `PlannerOptions` holds every assumption the cost model
makes, with its default and unit, so a plan can always say what it assumed.
"""

from typing import TYPE_CHECKING, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from day0.core.recompute import Recompute
from day0.planner.model import ActivationPolicy, ModelCosts, model_costs
from day0.spec.cluster import HardwareSpec
from day0.spec.pipeline import PipelineSpec
from day0.steps.parallel.config import SearchChoices

if TYPE_CHECKING:
    from day0.model.structure import ModelStructure

__all__ = [
    "DROPLESS_EXPERT_LOAD",
    "GIB",
    "ClusterFigures",
    "CommSettings",
    "Offload",
    "PlannerOptions",
    "Recompute",
    "activation_policy",
    "cluster_figures",
    "cluster_from_spec",
    "costs_for",
]

GIB = 1024**3
Offload = Literal["none", "optimizer", "activations", "optimizer+activations"]
Overlap = Literal["tp", "ep", "dp"]
DROPLESS_EXPERT_LOAD = 1.75
"""The busiest expert-parallel rank's routed tokens over the mean under dropless routing, derived (not fitted
on the published table) from NVIDIA's one published same-setup comparison of dropless and forced-balance
routing: Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md at c1ad0b5c, "Long Context" (Qwen3-235B-A22B, 256
H100, TP4 EP8 PP8 VPP4, DeepEP, bf16; TFLOP/s per GPU forced balance / dropless: 295/237 at 16K, 335/277 at 32K,
368/320 at 64K, 389/357 at 128K). `benchmarks.bench_planner.dropless_expert_load` finds, per length, the load at
which the cost model's dropless step is that many times its balanced one, and this is their median; the table
holds none of those runs."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClusterFigures(_Model):
    """The cluster a plan runs on: the platform's `HardwareSpec` (memory from the node pool when it
    differs) and how many accelerators there are, and how they sit in nodes."""

    hardware: HardwareSpec = Field(description="Per-accelerator figures: memory, peak TFLOP/s, bandwidths.")
    accelerators: int = Field(ge=1, description="Accelerators the plan may use (fixed pools + elastic maxima).")
    per_node: int = Field(ge=1, description="Accelerators per node; TP stays inside one node.")
    host_memory_gib_per_accelerator: float = Field(32, gt=0, description="Host RAM per accelerator (offload).")
    pools: list[str] = Field(default=[], description="Node pools the plan spans.")
    elastic_min_accelerators: int | None = Field(
        None,
        ge=0,
        description="With elastic pools: the accelerators at their minima (fixed pools + elastic minima); "
        "`accelerators` counts their maxima.",
    )
    pool_nodes: dict[str, tuple[int, int]] = Field(
        default={}, description="Nodes of each pool the plan spans: (minimum, maximum)."
    )
    notes: list[str] = Field(default=[], description="What was assumed or left out, for the report.")

    @property
    def memory_bytes(self) -> float:
        return self.hardware.figure("memory_gib") * GIB

    def with_accelerators(self, n: int) -> "ClusterFigures":
        return self.model_copy(update={"accelerators": n})


class CommSettings(_Model):
    """Communication techniques (step 4 tunes these; step 3 plans with the defaults)."""

    tp_overlap: bool = Field(False, description="Overlap TP all-gather/reduce-scatter with GEMMs.")
    ep_overlap: bool = Field(False, description="Overlap EP all-to-all with another micro-batch's compute.")
    dp_overlap: bool = Field(True, description="Overlap DP gradient reduction with the last backward.")
    grad_reduce_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="Gradient reduction dtype; None = the gradient dtype."
    )
    dispatch_dtype: Literal["bf16", "fp8"] = Field("bf16", description="MoE dispatch all-to-all dtype.")


SelectiveModule = Literal["core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp_act"]


class PlannerOptions(_Model, SearchChoices):
    """Every assumption of the cost model (those a spec may set declared once in `SearchChoices`);
    `day0.steps.parallel.plan.planner_inputs` fills it from a spec's `planner:` section and,
    when present, the platform's calibrated profile (`day0.planner.profile`)."""

    gemm_efficiency: dict[str, float] = Field(
        default_factory=lambda: {"fp32": 0.8, "bf16": 0.8, "fp16": 0.8, "fp8": 0.65},
        description="Fraction of the dtype's peak that large GEMMs reach (cuBLAS/Transformer Engine on H100: "
        "~0.8 bf16, ~0.65 fp8); the roofline in `timing.gemm_seconds` adds the size-dependent part. fp8's "
        "figure sits below the best published Hopper fp8 GEMM: DeepGEMM's 'up to 1350+ FP8 TFLOPS' at its "
        "release (deepseek-ai/open-infra-index README, Day 3), 0.68 of the 1,979 dense peak "
        "(1,550 after its 2025.04.18 kernels, DeepGEMM README); the table's runs use cuBLAS/Transformer Engine.",
    )
    gemm_measured: dict[str, list[tuple[int, int, int, float]]] = Field(
        default={},
        description="Calibrated GEMM rates by dtype, (m, n, k, TFLOP/s) as a training step runs them; a dtype "
        "with points takes its GEMMs' rates from them (`timing.measured_tflops`) instead of the roofline. "
        "Filled from the platform's calibrated profile.",
    )
    attention_efficiency: float = Field(
        0.5, gt=0, le=1, description="FlashAttention forward+backward fraction of the bf16 peak (Dao 2023: 0.5-0.7)."
    )
    dropless_expert_load: float = Field(
        DROPLESS_EXPERT_LOAD,
        ge=1,
        description="Under dropless routing with EP > 1, the busiest EP rank's routed tokens over the mean: its "
        "expert GEMMs and the all-to-all it receives take that much longer (DROPLESS_EXPERT_LOAD says where from).",
    )
    fragmentation_fraction: float = Field(0.05, ge=0, lt=1, description="Memory held back for allocator fragmentation.")
    framework_overhead_gib: float = Field(1.0, ge=0, description="CUDA context, NCCL communicators, workspaces.")
    host_bandwidth_gbps: float = Field(25, gt=0, description="Host<->device (PCIe) per accelerator, GB/s.")
    hbm_bandwidth_gbps: float = Field(
        3000, gt=0, description="Achieved device memory bandwidth (memory-bound kernels, optimizer step), GB/s."
    )
    collective_efficiency: float = Field(
        0.8, gt=0, le=1, description="Bus bandwidth large collectives reach, as a fraction of the link figure."
    )
    collective_latency_us: float = Field(10, ge=0, description="Fixed cost of one collective call, microseconds.")
    overlap_sm_fraction: float = Field(
        0.15,
        ge=0,
        lt=1,
        description="Compute lost to communication kernels while they overlap it, per second of communication "
        "(DeepSeek-V3 sec. 3.2.2: 20 of 132 SMs drive the all-to-all).",
    )
    cpu_adam_params_per_s: float = Field(2.5e8, gt=0, description="Offloaded Adam update rate per accelerator.")
    software_overlaps: list[Overlap] = Field(
        default_factory=lambda: list(get_args(Overlap)),
        description="Communication overlaps the training software has: step 4 switches on only these "
        "(`planner.software` sets them; default: Megatron-Core's, all three).",
    )
    software_dualpipe: bool = Field(
        True,
        description="The training software has DeepSeek's DualPipe schedule (deepseek-ai/DualPipe): the search tries "
        "it beside 1F1B where PP is even, unless `dualpipe` is pinned (`planner.software` sets it; default true).",
    )
    fused_optimizer: bool = Field(
        True,
        description="Adam is one fused pass over its states (Megatron, DeepSpeed); false: torch's foreach AdamW, "
        "a pass per op (what the trial runs).",
    )
    foreach_optimizer_costs: tuple[float, float] | None = Field(
        None,
        description="Measured (microseconds per tensor, nanoseconds per element) of the unfused foreach AdamW "
        "step with clipping (`fused_optimizer: false`); None: its bytes at the memory bandwidth plus its ops' "
        "dispatch. Filled from the platform's calibrated profile.",
    )
    selective_modules: list[SelectiveModule] = Field(
        default_factory=lambda: list(get_args(SelectiveModule)),
        description="What selective recompute recomputes (Megatron-Core --recompute-modules).",
    )
    fp8_recipe: Literal["delayed", "tensorwise", "blockwise", "mxfp8"] = Field(
        "blockwise", description="The FP8 scaling recipe with fp8 compute (what the framework configs name)."
    )
    fp8_format: Literal["e4m3", "hybrid"] = Field("hybrid", description="FP8 format: e4m3, or e5m2 for gradients.")
    micro_batches: list[int] | None = Field(
        None,
        description="Micro-batch sizes searched; None: every size the global batch allows at each data-parallel "
        "degree (issue 39: a published recipe's micro-batch of 16 was never tried under [1, 2, 4, 8]).",
    )
    zero_stages: list[int] = Field(default_factory=lambda: [0, 1, 2, 3])
    recompute: list[Recompute] = Field(default_factory=lambda: list(get_args(Recompute)))
    recompute_method: Literal["uniform", "block"] = Field(
        "uniform",
        description="How full recompute picks its layers (Megatron --recompute-method): 'uniform' checkpoints "
        "every group of `recompute_num_layers` layers, 'block' recomputes only the first that many per chunk.",
    )
    recompute_num_layers: int = Field(1, ge=1, description="Megatron --recompute-num-layers (default 1).")
    offload: list[Offload] = Field(default_factory=lambda: list(get_args(Offload)))
    keep_plans: int = Field(50, ge=1, description="Ranked plans kept (best per degree tuple).")
    pinned: dict[str, str] = Field(
        default={},
        description="Knobs the spec pins, by planner name (micro_batch, recompute, zero_stage, offload, tp_overlap, "
        "...), each with the spec field that pins it: the search keeps them and step 4 never changes them.",
    )
    comm: CommSettings = Field(default_factory=CommSettings)
    profile: str = Field("datasheet", description="Where the hardware figures come from: datasheet or calibrated.")

    def available_overlaps(self) -> list[str]:
        """The software's overlaps this setup can use: the EP overlap not with the all-gather dispatcher
        (Megatron's --overlap-moe-expert-parallel-comm requires the alltoall or flex dispatcher)."""
        return [o for o in self.software_overlaps if o != "ep" or self.moe_token_dispatcher != "allgather"]

    def gemm_fraction(self, compute: str) -> float:
        return self.gemm_efficiency.get(compute, self.gemm_efficiency.get("bf16", 0.8))

    def gemm_points(self, compute: str) -> list[tuple[int, int, int, float]]:
        """The calibrated GEMM rates of `compute` (16-bit dtypes without their own share bf16's)."""
        if compute in self.gemm_measured or compute in ("fp32", "fp8"):
            return self.gemm_measured.get(compute, [])
        return self.gemm_measured.get("bf16", [])


def activation_policy(options: PlannerOptions, compute: str) -> ActivationPolicy:
    """How `model_costs` stores activations under these options (FP8 caching only when computing in fp8)."""
    return ActivationPolicy(
        selective_modules=tuple(options.selective_modules),
        dropout=options.dropout,
        fp8_cache=options.fp8_activation_cache and compute == "fp8",
        fp8_compute=compute == "fp8",
        cp_kv_repeated=options.cp_kv_repeated,
    )


def costs_for(structure: "ModelStructure", options: PlannerOptions, compute: str) -> ModelCosts:
    """`model_costs` under these options: their activation policy and multi-token-prediction modules."""
    return model_costs(structure, activation_policy(options, compute), options.mtp_layers)


def cluster_figures(
    hardware: HardwareSpec,
    accelerators: int,
    per_node: int,
    memory_gib: float | None = None,
    host_memory_gib_per_accelerator: float = 32,
) -> ClusterFigures:
    """A homogeneous cluster of `accelerators` devices described by a platform's hardware (`memory_gib`
    overrides the platform's memory, as a node pool may)."""
    if memory_gib is not None and memory_gib != hardware.memory_gib:
        hardware = hardware.model_copy(update={"memory_gib": memory_gib})
    return ClusterFigures(
        hardware=hardware,
        accelerators=accelerators,
        per_node=per_node,
        host_memory_gib_per_accelerator=host_memory_gib_per_accelerator,
    )


def cluster_from_spec(spec: PipelineSpec) -> ClusterFigures:
    """The largest group of identical node pools (resource, per node, memory): one job, one kind of device."""
    hw = spec.platform.hardware
    pools = spec.cluster.node_pools
    if not pools:
        return cluster_figures(hw, 1, 1).model_copy(update={"notes": ["no node pools: one accelerator assumed"]})
    groups: dict[tuple[str, int, float], list] = {}
    for pool in pools:
        acc = pool.accelerator
        groups.setdefault((acc.resource, acc.per_node, acc.memory_gib), []).append(pool)
    key, chosen = max(groups.items(), key=lambda kv: (sum(p.max_nodes for p in kv[1]) * kv[0][1], kv[0][2]))
    _resource, per_node, memory_gib = key
    nodes = sum(p.max_nodes for p in chosen)
    host = min(p.memory_gib_per_node for p in chosen) / per_node
    notes = [
        f"pool {p.name} ({p.accelerator.resource}, {p.accelerator.memory_gib:g} GiB) not used: "
        "a plan spans one kind of accelerator"
        for p in pools
        if p not in chosen
    ]
    notes += [f"pool {p.name} counted at its elastic maximum ({p.elastic.max} nodes)" for p in chosen if p.elastic]
    if hw.memory_gib is None:
        notes.append(f"node pool memory {memory_gib:g} GiB used (the platform publishes none)")
    elif memory_gib != hw.memory_gib:
        notes.append(f"node pool memory {memory_gib:g} GiB used instead of the platform's {hw.memory_gib:g} GiB")
    figures = cluster_figures(hw, max(nodes * per_node, 1), per_node, memory_gib, host)
    span = {p.name: (p.elastic.min if p.elastic else p.max_nodes, p.max_nodes) for p in chosen}
    low = sum(lo for lo, _ in span.values()) * per_node
    update = {"pools": [p.name for p in chosen], "notes": notes, "pool_nodes": span}
    if any(p.elastic for p in chosen) and low != figures.accelerators:
        update["elastic_min_accelerators"] = low
    return figures.model_copy(update=update)
