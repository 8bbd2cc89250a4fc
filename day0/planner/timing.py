"""Time terms of one training step, each a small pure function.

References: ring collectives move (g-1)/g of the buffer per rank (Thakur et al. 2005; NCCL's
"bus bandwidth"); Megatron TP+SP does 2 all-gathers + 2 reduce-scatters per layer forward and the same
backward (Korthikanti et al. 2022 sec. 4.2.2); pipeline bubble (p-1)/v micro-batch slots for the
interleaved 1F1B schedule (Narayanan et al. 2021, sec. 2.2); model FLOPs 6·N per token plus attention
(Kaplan et al. 2020; PaLM appendix B), causal attention counted at half.
"""

from __future__ import annotations

__all__ = [
    "OPTIMIZER_BYTES_TOUCHED",
    "alltoall_seconds",
    "dp_sync_bytes",
    "expert_rows",
    "exposed",
    "gemm_efficiency",
    "link_bandwidth",
    "pipeline_seconds",
    "ring_seconds",
]

OPTIMIZER_BYTES_TOUCHED = 2 * 4 + 2 * 8  # fp32 master + two fp32 moments, each read and written per update


def gemm_efficiency(rows: float, base: float, half_rows: int) -> float:
    """Achievable fraction of peak for GEMMs with `rows` token rows: base·n/(n + n_half), a saturating
    curve (small micro-batches and heavy CP/TP splitting leave the tensor cores under-fed)."""
    return base * rows / (rows + half_rows)


def expert_rows(tokens: float, top_k: int, ep: int, etp: int, num_experts: int) -> float:
    """Rows of each local expert's GEMM: a rank's tokens x top-k copies, spread over the E/EP experts
    it hosts, gathered from its EP peers and its expert-TP group: tokens·k·EP·ETP / E / TP-split handled
    by the caller (`tokens` is already per rank). Few experts per rank -> big GEMMs (why EP pays)."""
    return tokens * top_k * ep * etp / num_experts if num_experts else tokens


def link_bandwidth(span: int, per_node: int, intra_gbps: float, inter_gbps: float) -> float:
    """Bytes/s for a group whose ranks span `span` consecutive ranks: NVLink-class inside a node,
    the per-accelerator NIC once it crosses nodes (a ring is as fast as its slowest hop)."""
    return (intra_gbps if span <= per_node else inter_gbps) * 1e9


def ring_seconds(buffer_bytes: float, group: int, bandwidth: float) -> float:
    """One all-gather or reduce-scatter of a `buffer_bytes` buffer over `group` ranks: (g-1)/g·B / bw."""
    return 0.0 if group <= 1 else (group - 1) / group * buffer_bytes / bandwidth


def alltoall_seconds(
    bytes_per_rank: float, group: int, stride: int, per_node: int, intra_gbps: float, inter_gbps: float
) -> float:
    """All-to-all where each rank sends `bytes_per_rank` spread evenly over `group` peers placed every
    `stride` ranks: (g-1)/g of it leaves the rank, the off-node share on the NIC, the rest on NVLink,
    both links working at once."""
    if group <= 1:
        return 0.0
    in_node = max(1, min(group, per_node // stride)) if stride <= per_node else 1
    off = bytes_per_rank * (group - in_node) / group
    on = bytes_per_rank * (in_node - 1) / group
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


def exposed(comm_s: float, window_s: float, overlap: bool) -> float:
    """Communication left on the critical path: all of it, or what the overlapping compute cannot hide."""
    return max(0.0, comm_s - window_s) if overlap else comm_s


def pipeline_seconds(microbatches: int, pp: int, vpp: int, slot_s: float) -> tuple[float, float]:
    """(pipeline time, bubble) for m micro-batches whose slowest stage takes `slot_s` each:
    (m + (p-1)/v)·slot, bubble (p-1)/v·slot (Narayanan et al. 2021)."""
    bubble = (pp - 1) / vpp * slot_s
    return microbatches * slot_s + bubble, bubble
