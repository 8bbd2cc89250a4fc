"""Memory per accelerator, one small pure function per term.

References: ZeRO (Rajbhandari et al. 2020, sec. 3: 2+2+12 bytes per parameter for mixed-precision
Adam, partitioned by stage); Megatron-LM's distributed optimizer (grads in fp32 `main_grad`: 6 + 12/d
bytes per parameter); Korthikanti et al. 2022 (activations with TP, sequence parallelism and
recompute; interleaved-schedule factor); Narayanan et al. 2021 / Megatron-LM `schedules.py` (micro-
batches in flight per pipeline rank under 1F1B and the interleaved schedule).
"""

from __future__ import annotations

from dataclasses import dataclass

from day0.core.precision import DTYPE_BYTES, kept_dtype
from day0.planner.model import KindCost, ModelCosts, Triple

KindSums = tuple[Triple, Triple, Triple, Triple]

__all__ = [
    "RECOMPUTE_INDEX",
    "KindSums",
    "ParamBytes",
    "activation_bytes",
    "activation_bytes_per_token",
    "dualpipe_weight_bytes",
    "embedding_head_params",
    "inflight_microbatches",
    "kind_activation_sums",
    "logits_bytes",
    "model_state_bytes",
    "param_bytes",
    "rank_params",
    "usable_bytes",
    "zero3_prefetch_bytes",
    "zero3_unit_params",
]

RECOMPUTE_INDEX = {"none": 0, "selective": 1, "full": 2}
_DTYPE_BYTES = {name: DTYPE_BYTES[kept_dtype(name)] for name in DTYPE_BYTES}  # fp8 weights are kept bf16


@dataclass(frozen=True, slots=True)
class ParamBytes:
    """Bytes per parameter of each model-state kind."""

    weight: int
    grad: int
    master: int
    moments: int

    @property
    def total(self) -> int:
        return self.weight + self.grad + self.master + self.moments


def param_bytes(compute: str, master_weights: str, grad_dtype: str, optimizer_state_dtype: str) -> ParamBytes:
    """Mixed-precision Adam: weights at the compute dtype, fp32 master copy unless weights already are it,
    gradients at `grad_dtype` (fp32 by default when the compute dtype is 16-bit), two Adam moments."""
    weight = _DTYPE_BYTES[compute]
    master = 4 if master_weights == "fp32" and weight != 4 else 0
    grad = max(_DTYPE_BYTES[grad_dtype], weight) if weight == 4 else _DTYPE_BYTES[grad_dtype]
    return ParamBytes(weight=weight, grad=grad, master=master, moments=2 * _DTYPE_BYTES[optimizer_state_dtype])


def model_state_bytes(
    params: float, shard: int, zero_stage: int, pb: ParamBytes, offload_optimizer: bool = False
) -> tuple[float, float, float, float]:
    """(weights, gradients, optimizer states on device, optimizer states on host) for `params` parameters
    whose data-parallel replicas number `shard`. ZeRO-1 (= distributed optimizer) partitions master
    weights and moments, ZeRO-2 also gradients, ZeRO-3 also weights (Rajbhandari et al. 2020, fig. 1)."""
    weights = params * pb.weight / (shard if zero_stage >= 3 else 1)
    grads = params * pb.grad / (shard if zero_stage >= 2 else 1)
    optim = params * (pb.master + pb.moments) / (shard if zero_stage >= 1 else 1)
    return (weights, grads, 0.0, optim) if offload_optimizer else (weights, grads, optim, 0.0)


def rank_params(dense: float, replicated: float, expert: float, tp: int, ep: int, etp: int) -> tuple[float, float]:
    """(dense, expert) parameters on one rank of a stage holding these: dense split by TP (norms and
    router replicated), routed experts split by EP x expert-TP (Megatron-Core's expert layout)."""
    return dense / tp + replicated, expert / (ep * etp)


def embedding_head_params(costs: ModelCosts, tp: int, pp: int, has_embedding: bool, has_head: bool) -> float:
    """Embedding and output-head parameters on one rank, vocabulary-parallel over TP; a tied head keeps
    its own copy of the embedding on the last stage when PP > 1 (Megatron-LM)."""
    emb, head = costs.embedding_params / tp, costs.head_params / tp
    return (
        (emb if has_embedding else 0.0)
        + (head if has_head else 0.0)
        + (emb if has_head and costs.tied and pp > 1 else 0.0)
    )


def usable_bytes(capacity_bytes: float, fragmentation_fraction: float, framework_overhead_gib: float) -> float:
    """Device memory left for the model once the fragmentation reserve and the runtime are held back."""
    return capacity_bytes * (1 - fragmentation_fraction) - framework_overhead_gib * 1024**3


def activation_bytes(
    sums: KindSums, recompute: str, tp: int, etp: int, seq: int, flash_attention: bool, sequence_parallel: bool = True
) -> float:
    """Stored activation bytes per token on one rank, given per-token sums (none, selective, full) of the
    TP-split tensors, the sequence-parallel region, the routed-token copies and the attention scores.

    Korthikanti et al. 2022 eq. 2-5: with TP only s·b·h·(10 + 24/t + 5·a·s/(h·t)), with sequence
    parallelism s·b·h/t·(34 + 5·a·s/h); selective recompute drops the tensors of the recomputed modules
    (the 5·a·s/h scores for core attention); full recompute keeps only the layer input, 2·s·b·h/t.
    Routed-token copies are split by t/etp (expert-TP gathers tokens). FlashAttention stores no scores.
    """
    i = RECOMPUTE_INDEX[recompute]
    tp_part, sp_part, expert, scores = sums
    scores_bytes = 0.0 if flash_attention else scores[i] * seq
    return (tp_part[i] + scores_bytes) / tp + sp_part[i] / (tp if sequence_parallel else 1) + expert[i] * etp / tp


def activation_bytes_per_token(
    kind: KindCost,
    recompute: str,
    tp: int,
    etp: int,
    seq: int,
    flash_attention: bool,
    sequence_parallel: bool = True,
) -> float:
    """`activation_bytes` for one layer of `kind`."""
    return activation_bytes(kind_activation_sums(kind), recompute, tp, etp, seq, flash_attention, sequence_parallel)


def kind_activation_sums(kind: KindCost) -> KindSums:
    """(TP-split, sequence-parallel region, routed copies, scores per unit s), each by recompute."""
    return kind.act_tp, kind.act_sp, kind.act_expert, kind.act_scores_per_seq


def inflight_microbatches(rank: int, pp: int, vpp: int, num_microbatches: int) -> float:
    """Micro-batches whose activations rank `rank` holds at its peak, in units of its full layer set.

    1F1B (Narayanan et al. 2021): rank r holds min(pp - r, m). Interleaved with v chunks (Megatron-LM
    schedules): (pp - r - 1)·2 + (v - 1)·pp + 1 chunk-micro-batches, each 1/v of the rank's layers.
    """
    if vpp == 1:
        return float(min(pp - rank, num_microbatches))
    chunks = min((pp - rank - 1) * 2 + (vpp - 1) * pp + 1, num_microbatches * vpp)
    return chunks / vpp


def logits_bytes(tokens: float, vocab: int, tp: int) -> float:
    """Output logits of one micro-batch on the last stage: bf16 logits plus the fp32 softmax for the
    cross-entropy, vocabulary-parallel over TP (Megatron `vocab_parallel_cross_entropy`)."""
    return tokens * vocab / tp * (2 + 4)


def zero3_prefetch_bytes(unit_params: float, weight_bytes: int) -> float:
    """ZeRO-3 gathers one unit's full weights before use and prefetches the next: two units resident
    (Rajbhandari et al. 2020 sec. 7; PyTorch FSDP's forward prefetch). The unit is the largest module
    gathered at once (`zero3_unit_params`), not the whole layer of an MoE."""
    return 2 * unit_params * weight_bytes


def zero3_unit_params(dense: float, replicated: float, expert: float) -> float:
    """Parameters of the largest gathered unit of a layer on one rank: a dense layer is gathered whole;
    an MoE layer's attention and shared parts and its local experts are gathered one after the other."""
    return max(dense + replicated, expert) if expert else dense + replicated + expert


def dualpipe_weight_bytes(weight_bytes: float, dualpipe: bool) -> float:
    """Extra device bytes of DualPipe (DeepSeek-V3 tech report sec. 3.2.1): the bidirectional schedule
    keeps two copies of each rank's parameters (and their gradients)."""
    return weight_bytes if dualpipe else 0.0
