"""The step-time terms of a plan, composed from `timing`'s primitives: one pipeline stage's time per
micro-batch, the pipeline point-to-point, the data-parallel sync, the optimizer update, and MFU.

Contract: each term is defined here once. `PlanContext` (evaluate.py) calls them for every rank group;
`StaticBound` (bounds.py) calls the same functions with the mean stage of the model, so a change to a
term moves the evaluation and its bound together. `stage_seconds` is convex in the stage's work
(sums of linear terms and max(0, linear) terms), so at the mean stage it never exceeds the slowest
stage (Jensen's inequality): that is what makes the static bound a bound.

References: Megatron TP + sequence parallelism, 2 all-gathers + 2 reduce-scatters per layer forward and
backward, 4 more with full recompute (Korthikanti et al. 2022, sec. 4.2.2); MoE dispatch + combine
all-to-all forward, their gradients backward (GShard, Lepikhin et al. 2020); ring attention exchanges
K/V CP-1 times, overlapped with attention (Liu et al. 2023); backward = 2x forward FLOPs; model FLOPs
6·N per token plus causal attention (Kaplan et al. 2020; PaLM appendix B); MFU against the peak of the
dtype the GEMMs run at (PaLM sec. 4.1). Host dispatch: every eager op costs the platform's
`kernel_launch_us` of host time (`kernels.model_kernels` counts them), added to the compute where the
host runs the kernels itself (a CPU) and hidden behind device work where launches are asynchronous.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from day0.planner import timing as tm
from day0.planner.inputs import CommSettings, PlannerOptions
from day0.planner.kernels import FORWARD_SHARE
from day0.planner.memory import ParamBytes
from day0.planner.model import ModelCosts
from day0.planner.rates import BYTES, StepRates, gemm_peak_flops
from day0.planner.values import RECOMPUTES, Degrees

__all__ = [
    "FLASH_BACKWARD_FLOPS",
    "StageTime",
    "StageWork",
    "StepRates",
    "activation_offload_seconds",
    "cp_ring_seconds",
    "dp_exposed_seconds",
    "dp_sync_seconds",
    "floor_modes",
    "gemm_peak_flops",
    "grad_reduce_bytes",
    "least_zero_stages",
    "mfu",
    "model_flops_per_step",
    "optimizer_launch_seconds",
    "optimizer_params",
    "optimizer_seconds_per_param",
    "slot_floor",
    "stage_seconds",
]


FLASH_BACKWARD_FLOPS = 2.5
"""A fused (Flash) attention backward's FLOPs over its forward's: it recomputes the scores QK^T before the four
gradient GEMMs (Dao et al. 2022, arXiv:2205.14135, algorithm 4), and the FlashAttention efficiency figures are
measured on that count (Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py: bwd = 2.5 x fwd),
so a step spends 1 + 2.5 forward-attention times at the quoted efficiency, not the 1 + 2 of GEMMs."""


def attention_passes(flash: bool) -> float:
    """Forward + backward attention time in forward attention times: 1 + `FLASH_BACKWARD_FLOPS` for fused
    attention, 1 + 2 for the unfused batched GEMMs (the stored scores are not recomputed)."""
    return 1 + (FLASH_BACKWARD_FLOPS if flash else 2.0)


@dataclass(frozen=True, slots=True)
class StageWork:
    """Forward work per token of one pipeline rank, summed over its layers."""

    layers: float
    moe_layers: float
    dense_active: float  # non-routed parameters each token multiplies (2 FLOPs each)
    routed_active: float  # routed-expert parameters each token multiplies (grouped GEMMs)
    head_flops: float  # output head FLOPs per token (the last stage only)
    attn_per_seq: float  # attention FLOPs per token per unit of sequence length (causal)
    selective_flops: float  # FLOPs per token that selective recompute repeats
    cp_kv: float  # K+V bytes per token exchanged by context parallelism
    memory_bound: float  # bytes per token moved by memory-bound kernels (norms, activations, routing)
    selective_memory_bound: float  # of which selective recompute repeats
    scores_traffic_per_seq: float  # bytes per token per unit s of an unfused softmax

    def scaled(self, factor: float) -> StageWork:
        return StageWork(*(getattr(self, f.name) * factor for f in fields(self)))


@dataclass(slots=True)  # built per stage and recompute mode: not frozen, for a cheap init
class StageTime:
    """One stage's time per micro-batch and its parts (comm before overlap)."""

    compute_s: float
    recompute_s: float
    tp_comm_s: float
    ep_comm_s: float
    cp_comm_s: float
    slot_s: float  # compute + recompute + exposed communication + exposed dispatch
    launch_s: float = 0.0  # host dispatch left on the critical path
    tp_exposed_s: float = 0.0  # of the TP collectives, on the critical path (the rest overlaps GEMMs)
    ep_exposed_s: float = 0.0  # of the MoE all-to-all, on the critical path
    cp_exposed_s: float = 0.0  # of the CP K/V ring, on the critical path (the rest hides behind attention)
    host_s: float = 0.0  # host dispatch of the stage's ops, before any of it hides behind device work


def grad_reduce_bytes(comm: CommSettings, pb: ParamBytes) -> int:
    """Bytes per gradient element on the data-parallel ring: the reduce dtype if set, else the grad dtype."""
    return BYTES[comm.grad_reduce_dtype] if comm.grad_reduce_dtype else pb.grad


def stage_seconds(
    w: StageWork, recompute: str, r: StepRates, seq: int, d: Degrees, o: PlannerOptions, full_fraction: float = 1.0
) -> StageTime:
    """Forward + backward of one micro-batch on a stage doing `w`: GEMMs and memory-bound kernels at 3x their
    forward, attention at `attention_passes`; selective recompute repeats `selective_flops` (and an unfused core
    attention when it recomputes it), full recompute the whole forward but the head (`full_fraction` of
    it: Megatron's `block` method recomputes only some layers); TP/EP collectives exposed unless
    overlapped; the CP K/V ring (CP-1 exchanges per pass, each paying the collective latency) exposed
    beyond the attention of the remote blocks it overlaps, or, gathered whole (PyTorch's all-gather rotation),
    the forward's exchange exposed and the backward's hidden as a ring's; host dispatch of the stage's ops (full
    recompute repeats the forward's share) added or hidden behind the busy time."""
    tok, flash, comm = r.tokens / d.tensor_parallel, o.flash_attention, o.comm
    full = full_fraction if recompute == "full" else 0.0
    lin, routed = 2 * tok * w.dense_active / r.linear_flops, 2 * tok * w.routed_active / r.expert_flops
    attn = tok * seq * w.attn_per_seq / r.attention_flops
    attn += 0.0 if flash else tok * seq * w.scores_traffic_per_seq / r.hbm
    membound = tok * w.memory_bound / r.hbm + w.moe_layers * r.moe_permute_s
    forward = lin + tok * w.head_flops / r.head_flops + routed + membound + attn
    compute = 3 * (forward - attn) + attention_passes(flash) * attn
    if recompute == "selective":
        core = "core_attn" in o.selective_modules  # Megatron-Core checkpoints core attention, flash or not
        extra = tok * w.selective_flops / r.linear_flops + tok * w.selective_memory_bound / r.hbm
        extra += attn if core else 0.0
    else:
        extra = full * (lin + routed + attn + membound)
    tp = w.layers * (8 + 4 * full) * r.tp_ring_s
    forward_a2a = w.moe_layers * (r.dispatch_s + r.combine_s)
    backward_a2a = w.moe_layers * 2 * r.combine_s + full * forward_a2a  # gradients, and the recompute's forward
    ep = forward_a2a + backward_a2a
    cp_deg = d.context_parallel
    cp = cp_ring_seconds(tok, w, r, cp_deg)  # the forward's K/V, the backward's, their gradients
    remote = (cp_deg - 1) / cp_deg  # the attention of the other ranks' blocks, which a ring hides behind
    if o.cp_kv_exchange == "allgather":  # gathered after the first block, before the rest: the forward waits
        gather = cp / 3
        cp += full * gather  # full recompute's forward gathers again
        cp_x = (1 + full) * gather + max(0.0, 2 * gather - (attention_passes(flash) - 1) * attn * remote)
    else:
        cp_x = max(0.0, cp - attention_passes(flash) * attn * remote)
    busy = compute + extra
    layer_ops = (w.layers * r.layer_kernels + w.moe_layers * r.moe_kernels) * (1 + FORWARD_SHARE * full)
    launch = tm.launch_seconds(layer_ops + w.head_flops * r.head_kernels_per_flop, r.kernel_s, busy, r.launch_async)
    host = tm.launch_seconds(layer_ops + w.head_flops * r.head_kernels_per_flop, r.kernel_s, 0.0, False)
    sm = o.overlap_sm_fraction
    tp_x = tm.exposed(tp, busy, comm.tp_overlap, sm)
    if comm.ep_overlap:  # a forward's all-to-alls hide behind the paired micro-batch's backward, and back
        ep_x = max(0.0, forward_a2a - (busy - forward)) + max(0.0, backward_a2a - forward) + sm * ep
    else:
        ep_x = ep
    return StageTime(
        compute_s=compute,
        recompute_s=extra,
        tp_comm_s=tp,
        ep_comm_s=ep,
        cp_comm_s=cp,
        slot_s=busy + tp_x + ep_x + cp_x + launch,
        launch_s=launch,
        tp_exposed_s=tp_x,
        ep_exposed_s=ep_x,
        cp_exposed_s=cp_x,
        host_s=host,
    )


def slot_floor(s: StageTime, comm: CommSettings, sm_fraction: float, launch_async: bool) -> float:
    """The least slot the stage can take under any recompute mode that adds to `s`'s work: recompute only
    adds device work and communication, and added work hides more of the overlapped collectives and of
    asynchronous host dispatch. The slot, busy + sum of max(0, c - busy) + constants, falls with added
    work only while two or more hidden terms exceed the busy time, so it is least at the second largest
    of them (or at the busy time, then it is `s.slot_s`)."""
    hidden = [c for c, on in ((s.tp_comm_s, comm.tp_overlap), (s.ep_comm_s, comm.ep_overlap)) if on]
    hidden = sorted([*hidden, s.host_s] if launch_async else hidden)
    if len(hidden) < 2 or hidden[-2] <= s.compute_s + s.recompute_s:
        return s.slot_s
    b = hidden[-2]
    tp = tm.exposed(s.tp_comm_s, b, comm.tp_overlap, sm_fraction)
    ep = tm.exposed(s.ep_comm_s, b, comm.ep_overlap, sm_fraction)
    return b + tp + ep + s.cp_exposed_s + tm.launch_seconds(s.host_s, 1.0, b, launch_async)  # host_s: seconds


def floor_modes(allowed: Sequence[str]) -> list[str]:
    """The recompute modes whose `slot_floor`s bound every allowed mode's slot: "none" alone when allowed
    (every other mode adds to its work), else each allowed mode."""
    return ["none"] if "none" in allowed else [rc for rc in RECOMPUTES if rc in allowed]


def cp_ring_seconds(tokens: float, w: StageWork, r: StepRates, cp: int) -> float:
    """Context parallelism's K/V ring for one micro-batch, forward and backward: CP-1 exchanges of each
    layer's K and V (3 passes: forward, and backward's K/V and their gradients), each paying the collective
    latency (Liu et al. 2023, ring attention; Megatron's p2p CP)."""
    if cp <= 1:
        return 0.0
    return 3 * (cp - 1) * (tokens * w.cp_kv / r.cp_bandwidth + w.layers * r.collective_latency_s)


def activation_offload_seconds(activation_bytes: float, compute_s: float, host_bandwidth_gbps: float) -> float:
    """Activation offload left on the critical path: each micro-batch's activations go to the host
    and back (2·A / PCIe), overlapped with its compute."""
    return max(0.0, 2 * activation_bytes / (host_bandwidth_gbps * 1e9) - compute_s)


def dp_sync_seconds(
    dense_params: float,
    expert_params: float,
    zero_stage: int,
    grad_bytes: int,
    weight_bytes: int,
    d: Degrees,
    bandwidth: float,
    expert_bandwidth: float,
) -> float:
    """One rank's data-parallel traffic per step: dense parameters over their DP·CP replicas, expert
    parameters over theirs (TP·CP·DP / EP·ETP), each a ring at its group's bus bandwidth."""
    m = d.num_microbatches
    return tm.ring_seconds(
        tm.dp_sync_bytes(dense_params, grad_bytes, weight_bytes, zero_stage, m), d.dense_replicas, bandwidth
    ) + tm.ring_seconds(
        tm.dp_sync_bytes(expert_params, grad_bytes, weight_bytes, zero_stage, m), d.expert_replicas, expert_bandwidth
    )


def dp_exposed_seconds(dp_s: float, slot_s: float, zero_stage: int, microbatches: int, overlap: bool) -> float:
    """DP sync left on the critical path: ZeRO 0-1 sync once, behind the last backward; ZeRO 2-3 sync
    every micro-batch, each hidden behind one micro-batch of compute at best. Never falls faster than the
    pipeline term rises with `slot_s` (by at most m per unit), so a step built on it grows with the slot."""
    if zero_stage <= 1:
        return tm.exposed(dp_s, slot_s, overlap)
    return microbatches * tm.exposed(dp_s / microbatches, slot_s, overlap)


def least_zero_stages(allowed: Sequence[int], grad_bytes: int, weight_bytes: int) -> list[int]:
    """The allowed ZeRO stages whose DP sync plus optimizer update can be the least: ZeRO-3 moves more
    bytes than ZeRO-2 (m·(2W+G) against m·G+W) and updates as many parameters, and ZeRO-0 moves no fewer
    than ZeRO-1 (2G against G+W) when weights are no wider than gradients and updates more; under the
    same exposure rule (`dp_exposed_seconds`) the dominated stage's time is never below the other's."""
    out = set(allowed)
    if 2 in out:
        out.discard(3)
    if 1 in out and weight_bytes <= grad_bytes:
        out.discard(0)
    return sorted(out)


def optimizer_params(dense_params: float, expert_params: float, zero_stage: int, d: Degrees) -> float:
    """Parameters a rank's optimizer updates: all it holds, or its 1/replicas shard from ZeRO-1 on."""
    if zero_stage == 0:
        return dense_params + expert_params
    return dense_params / d.dense_replicas + expert_params / d.expert_replicas


def optimizer_launch_seconds(r: StepRates, options: PlannerOptions) -> float:
    """Per-tensor cost of one rank's clipping + optimizer step: a calibrated foreach step's cost per
    tensor (it loops over them where the device has no multi-tensor kernels), else the host dispatch of
    its ops (on an asynchronous device it queues behind the last backward and is taken as hidden)."""
    if not options.fused_optimizer and options.foreach_optimizer_costs is not None:
        return r.optimizer_tensors * options.foreach_optimizer_costs[0] * 1e-6
    return 0.0 if r.launch_async else tm.launch_seconds(r.optimizer_kernels, r.kernel_s, 0.0, False)


def optimizer_seconds_per_param(offload: str, pb: ParamBytes, options: PlannerOptions) -> float:
    """Adam update time per parameter: memory-bound on device (fused: master, moments, grad and weight
    touched once; foreach: a pass per op, `timing.FOREACH_ADAMW_BYTES_TOUCHED`), or ZeRO-Offload (Ren et
    al. 2021): grads down, weights up over PCIe, Adam on the CPU."""
    if "optimizer" in offload:
        return (pb.grad + pb.weight) / (options.host_bandwidth_gbps * 1e9) + 1 / options.cpu_adam_params_per_s
    if not options.fused_optimizer and options.foreach_optimizer_costs is not None:
        return options.foreach_optimizer_costs[1] * 1e-9  # measured on the platform (`day0 calibrate`)
    touched = (
        tm.OPTIMIZER_BYTES_TOUCHED + pb.grad + pb.weight if options.fused_optimizer else tm.FOREACH_ADAMW_BYTES_TOUCHED
    )
    return touched / (options.hbm_bandwidth_gbps * 1e9)


def model_flops_per_step(costs: ModelCosts, global_batch: int, seq: int) -> float:
    """Model FLOPs of one step: B·s·(6·N_active,non-embedding + 3·s·Σ attention per unit of s), i.e.
    forward 2N + backward 4N per token, causal attention at half (PaLM appendix B)."""
    attn = sum(costs.kinds[i].attn_flops_per_seq for i in costs.layer_kind)
    return global_batch * seq * (6 * (costs.params_active - costs.embedding_params) + 3 * seq * attn)


def mfu(model_flops: float, step_s: float, accelerators: int, peak_flops: float) -> float:
    """Model FLOPs utilisation: model FLOPs / (step time x accelerators x peak), the peak being that of the
    dtype the GEMMs run at (`gemm_peak_flops`), so fp8 training is not credited against the bf16 peak."""
    return model_flops / (step_s * accelerators * peak_flops)
