"""Time terms of one training step, each a small pure function.

References: ring collectives move (g-1)/g of the buffer per rank (Thakur et al. 2005; NCCL's
"bus bandwidth"); Megatron TP+SP does 2 all-gathers + 2 reduce-scatters per layer forward and the same
backward (Korthikanti et al. 2022 sec. 4.2.2); pipeline bubble (p-1)/v micro-batch slots for the
interleaved 1F1B schedule (Narayanan et al. 2021, sec. 2.2); model FLOPs 6·N per token plus attention
(Kaplan et al. 2020; PaLM appendix B), causal attention counted at half.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "FOREACH_ADAMW_BYTES_TOUCHED",
    "OPTIMIZER_BYTES_TOUCHED",
    "allgather_dispatch_seconds",
    "allgather_permute_bytes",
    "dp_sync_bytes",
    "expert_alltoall_seconds",
    "expert_gemm_shapes",
    "expert_rows",
    "exposed",
    "gemm_efficiency",
    "gemm_seconds",
    "launch_seconds",
    "layer_gemm_shapes",
    "link_bandwidth",
    "measured_tflops",
    "pipeline_seconds",
    "ring_bandwidth",
    "ring_seconds",
]

OPTIMIZER_BYTES_TOUCHED = 2 * 4 + 2 * 8  # fp32 master + two fp32 moments, each read and written per update
FOREACH_ADAMW_BYTES_TOUCHED = 72 + 12
"""Bytes per fp32 parameter of unfused foreach AdamW (torch.optim.AdamW(foreach=True), what the trial runs)
plus foreach clipping, each op a pass of its own: decay (r+w param 8), lerp of m (r g, r+w m: 12), v·β2
(8), addcmul into v (r g, r+w v: 12), sqrt(v) into a new buffer (8), its divide and epsilon add (8 + 8),
addcdiv into the parameter (r+w p, r m, r denominator: 16) = 72 with the gradient's reads; clipping
reads the gradients for the norm (4) and scales them in place (8). Fused Adam does it in one pass
(`OPTIMIZER_BYTES_TOUCHED` + gradient + weight)."""


def gemm_seconds(m: float, n: float, k: float, dtype_bytes: int, peak: float, fraction: float, hbm: float) -> float:
    """One (m x k) @ (k x n) GEMM on a roofline whose compute roof is `fraction` of the dtype's peak:
    2·m·n·k / (peak·fraction) plus the operand and result traffic (m·k + k·n + m·n)·bytes / HBM
    bandwidth (Williams et al. 2009, summed rather than maxed: tiles stream in while others compute only
    partly). Large GEMMs reach `fraction`; thin ones (few tokens per expert, narrow TP shards) fall below."""
    return 2 * m * n * k / (peak * fraction) + (m * k + k * n + m * n) * dtype_bytes / hbm


def measured_tflops(m: float, n: float, k: float, points: Sequence[tuple[int, int, int, float]]) -> float:
    """TFLOP/s of an (m, n, k) GEMM read from calibrated points (m, n, k, TFLOP/s): the shape is clamped
    into the measured range dimension by dimension (beyond it, the edge's rate holds), then inverse-
    distance weighting (Shepard 1968) in log2 shape space at power 4, so the nearest measured shapes
    dominate and a measured shape gets its own figure. Written here because no kept library
    interpolates scattered points without numpy/scipy, which `day0 plan` does not import."""
    lo = [min(p[i] for p in points) for i in range(3)]
    hi = [max(p[i] for p in points) for i in range(3)]
    q = [min(max(x, lo[i]), hi[i]) for i, x in enumerate((m, n, k))]
    weights = total = 0.0
    for pm, pn, pk, tflops in points:
        d2 = math.log2(q[0] / pm) ** 2 + math.log2(q[1] / pn) ** 2 + math.log2(q[2] / pk) ** 2
        if d2 < 1e-12:
            return tflops
        w = 1 / d2**2
        weights, total = weights + w, total + w * tflops
    return total / weights


def gemm_efficiency(
    shapes: Sequence[tuple[float, float, float]],
    dtype_bytes: int,
    peak: float,
    fraction: float,
    hbm: float,
    measured: Sequence[tuple[int, int, int, float]] = (),
) -> float:
    """Achieved fraction of peak over a sequence of GEMMs (m, n, k): their FLOPs / (peak x their time),
    each timed at its `measured` rate where the platform was calibrated, else on the roofline."""
    flops = sum(2 * m * n * k for m, n, k in shapes)
    if flops == 0:
        return fraction
    if measured:
        seconds = sum(2 * m * n * k / (measured_tflops(m, n, k, measured) * 1e12) for m, n, k in shapes)
    else:
        seconds = sum(gemm_seconds(m, n, k, dtype_bytes, peak, fraction, hbm) for m, n, k in shapes)
    return flops / (peak * seconds)


def layer_gemm_shapes(rows: float, hidden: int, qkv: float, ffn: int, gated: bool, tp: int) -> list[tuple]:
    """The (m, n, k) of a transformer layer's four GEMMs on one TP rank (Megatron column/row parallel):
    QKV (rows, qkv/t, h), output projection (rows, h, h/t), MLP up (rows, (2)f/t, h), MLP down (rows, h, f/t)."""
    up = (2 if gated else 1) * ffn
    return [(rows, qkv / tp, hidden), (rows, hidden, hidden / tp), (rows, up / tp, hidden), (rows, hidden, ffn / tp)]


def expert_gemm_shapes(rows: float, hidden: int, ffn: int, etp: int) -> list[tuple]:
    """A routed expert's grouped-GEMM shapes: gate+up (rows, 2f/etp, h), down (rows, h, f/etp)."""
    return [(rows, 2 * ffn / etp, hidden), (rows, hidden, ffn / etp)]


def expert_rows(tokens: float, top_k: int, ep: int, etp: int, num_experts: int) -> float:
    """Rows of each local expert's GEMM: a rank's tokens x top-k copies, spread over the E/EP experts
    it hosts, gathered from its EP peers and its expert-TP group: tokens·k·EP·ETP / E / TP-split handled
    by the caller (`tokens` is already per rank). Few experts per rank -> big GEMMs (why EP pays)."""
    return tokens * top_k * ep * etp / num_experts if num_experts else tokens


def link_bandwidth(span: int, per_node: int, intra_gbps: float, inter_gbps: float) -> float:
    """Bytes/s for a group whose ranks span `span` consecutive ranks: NVLink-class inside a node,
    the per-accelerator NIC once it crosses nodes (a ring is as fast as its slowest hop)."""
    return (intra_gbps if span <= per_node else inter_gbps) * 1e9


def ring_bandwidth(group: int, stride: int, per_node: int, intra_gbps: float, inter_gbps: float) -> float:
    """Bus bandwidth, bytes/s, of a ring collective (all-reduce, all-gather, reduce-scatter) over `group`
    ranks placed every `stride` ranks: NVLink-class inside a node. Across nodes NCCL runs one ring per
    NIC, each crossing the node boundary on its own NIC, so the group's node-crossing traffic spreads over
    the NICs of its ranks on each node: k ranks per node x the per-accelerator NIC figure (k <= per_node:
    at most the node's total), never above the NVLink hops the rings also take. Measured: nccl-tests
    all_reduce busbw on DGX A100 reaches its 8 NICs' total, 192 GB/s for 8 x 200 Gb/s (NVIDIA/nccl#812);
    on A100 nodes with 4 HDR NICs for 8 GPUs, 96 GB/s of the 100 (NVIDIA/nccl-tests#119); NDR 400 Gb/s
    gives 46-48 GB/s per NIC (NVIDIA/nccl-tests#290). A group with one rank per node (TP8 DP) keeps one NIC."""
    if group * stride <= per_node:
        return intra_gbps * 1e9
    ranks_per_node = max(1, min(group, per_node // stride))
    return min(intra_gbps, ranks_per_node * inter_gbps) * 1e9


def ring_seconds(buffer_bytes: float, group: int, bandwidth: float) -> float:
    """One all-gather or reduce-scatter of a `buffer_bytes` buffer over `group` ranks: (g-1)/g·B / bw."""
    return 0.0 if group <= 1 else (group - 1) / group * buffer_bytes / bandwidth


def allgather_dispatch_seconds(
    tokens: float, token_bytes: float, group: int, stride: int, per_node: int, intra_gbps: float, inter_gbps: float
) -> float:
    """MoE dispatch (or combine) by Megatron's all-gather token dispatcher (`MoEAllGatherTokenDispatcher`):
    every rank gathers all `tokens` of each of its `group` EP peers (placed every `stride` ranks), not only the
    copies routed to its experts, and keeps its experts' rows; the combine reduce-scatters a buffer of the same
    size. A ring over the group at its bus bandwidth: (g-1)·tokens per rank against the all-to-all's (g-1)/g·k
    copies, so it moves g/k times the all-to-all's bytes (more where EP exceeds top-k)."""
    if group <= 1:
        return 0.0
    bandwidth = ring_bandwidth(group, stride, per_node, intra_gbps, inter_gbps)
    return ring_seconds(group * tokens * token_bytes, group, bandwidth)


def allgather_permute_bytes(tokens: float, token_bytes: float, group: int) -> float:
    """Device-memory bytes one forward of the all-gather dispatcher moves beyond the routed rows the all-to-all
    permutes too: it reads the gathered buffer of all `group` peers' tokens to pick its experts' rows, and the
    unpermute writes a zero-filled buffer of the same size that its rows are scattered into before the
    reduce-scatter (megatron/core/transformer/moe/token_dispatcher.py)."""
    return 0.0 if group <= 1 else 2 * group * tokens * token_bytes


def expert_alltoall_seconds(
    tokens: float,
    top_k: int,
    token_bytes: float,
    group: int,
    stride: int,
    per_node: int,
    intra_gbps: float,
    inter_gbps: float,
    max_nodes: int | None,
    load: float = 1.0,
    once_per_node: bool = False,
) -> float:
    """MoE dispatch (or combine) of `tokens` tokens, each sent to `top_k` experts spread over `group` EP
    ranks placed every `stride` ranks. Sent rank to rank (an NCCL all-to-all) each copy goes where its expert
    is: the off-node share of the k copies crosses the NIC, whatever node limit the router keeps (a limit of
    M nodes moves no copy off or on the sender's node on average). Sent `once_per_node` (DeepEP, DeepSeek-V3
    sec. 3.2.2: one NIC transfer per node, then NVLink forwarding to the experts there) a token crosses the
    NIC at most min(k, M) x (nodes-1)/nodes times, M the node limit (sec. 2.1.2) or every node; the in-node
    fan-out rides NVLink. The node's
    off-node traffic, its in-node ranks' worth, leaves over those ranks' NICs (in-node ranks x the NIC
    figure, as in `ring_bandwidth`): one NIC's worth per rank, since the node's other NICs carry the
    concurrent all-to-alls of the other EP groups. The busiest rank receives `load` x the mean copies (dropless
    routing): its NVLink share, and its NIC share where copies go rank to rank; sent once per node, each token
    goes to a node on the rail of its sender, so the NIC share follows the node's load, which averages its
    ranks' and is taken as balanced."""
    if group <= 1:
        return 0.0
    in_node = max(1, min(group, per_node // stride)) if stride <= per_node else 1
    nodes = max(1, group // in_node)
    remote = top_k * (group - in_node) / group  # copies whose expert sits on another node
    off_copies, on_copies = remote, top_k * (in_node - 1) / group
    off_load = load
    if once_per_node and nodes > 1:  # one NIC transfer per node, then forwarded over NVLink
        off_copies = min(remote, min(top_k, max_nodes or nodes) * (nodes - 1) / nodes)
        on_copies += remote
        off_load = 1.0
    off, on = tokens * token_bytes * off_copies * off_load, tokens * token_bytes * on_copies * load
    return max(on / (intra_gbps * 1e9), off / (inter_gbps * 1e9))


def dp_sync_bytes(params: float, grad_bytes: int, weight_bytes: int, zero_stage: int, microbatches: int) -> float:
    """Bytes one rank pushes through a data-parallel ring per step (before the (g-1)/g factor).

    ZeRO-0: all-reduce of gradients (2·G). ZeRO-1 / distributed optimizer: reduce-scatter of gradients +
    all-gather of updated weights. ZeRO-2: gradients reduce-scattered every micro-batch. ZeRO-3: weights
    gathered for forward and backward and gradients reduce-scattered, every micro-batch (Rajbhandari
    et al. 2020, sec. 7)."""
    g, w = params * grad_bytes, params * weight_bytes
    if zero_stage == 0:
        return 2 * g
    if zero_stage == 1:
        return g + w
    if zero_stage == 2:
        return microbatches * g + w
    return microbatches * (2 * w + g)


def exposed(comm_s: float, window_s: float, overlap: bool, sm_fraction: float = 0.0) -> float:
    """Communication left on the critical path: all of it, or what the overlapping compute cannot hide
    plus the compute its kernels slow down (`sm_fraction` of each overlapped second: linear, so a stage's
    time stays convex in its work)."""
    return max(0.0, comm_s - window_s) + sm_fraction * comm_s if overlap else comm_s


def pipeline_seconds(
    microbatches: int, pp: int, vpp: int, slot_s: float, dualpipe: bool = False
) -> tuple[float, float]:
    """(pipeline time, bubble) for m micro-batches whose slowest stage takes `slot_s` each:
    (m + (p-1)/v)·slot, bubble (p-1)/v·slot (Narayanan et al. 2021). DualPipe feeds micro-batches from
    both ends: bubble (p/2 - 1) slots (DeepSeek-V3 table 2, with F&B + B - 3W taken as one slot)."""
    bubble = (max(0.0, pp / 2 - 1) if dualpipe and pp > 1 else (pp - 1) / vpp) * slot_s
    return microbatches * slot_s + bubble, bubble


def launch_seconds(kernels: float, seconds_per_kernel: float, device_busy_s: float, asynchronous: bool) -> float:
    """Host dispatch of `kernels` ops at `seconds_per_kernel` each left on the critical path. Synchronous
    (a CPU computes its own kernels) it adds to the compute; asynchronous (GPUs, NPUs: the host queues
    kernels ahead) only what exceeds the device's busy time shows (max(0, linear): convex in the work)."""
    host = kernels * seconds_per_kernel
    return max(0.0, host - device_busy_s) if asynchronous else host
