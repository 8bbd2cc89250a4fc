"""How many ops an eager training step dispatches: per decoder layer by kind (forward + backward), the
embedding, head and loss, and the optimizer step. On a device whose kernels are tiny (the trial's scaled
model on a CPU) a step is dominated by the fixed host cost of each op, not by its FLOPs or bytes.

Source of the counts: a `TorchDispatchMode` counting every aten call of one training step exactly as the
trial runs it (`day0.core.training`: forward under autocast, fp32 loss, backward, foreach gradient
clipping, foreach AdamW) on the Hugging Face implementations (transformers 5.24, torch 2.x), differencing
models of 2 and 3 layers of one kind: DeepSeek-V3 (MLA; dense and grouped-GEMM MoE layers), Llama 3
(GQA, dense), Qwen3-MoE (GQA, grouped-GEMM MoE; Mixtral's MoE layer counts ~12% fewer). The counts do not
depend on widths, sequence length or batch (checked at hidden 64-256, 16-128 tokens, batch 1-4), nor on
the number of experts (grouped GEMMs). MHA and MQA run GQA's code; sliding-window kinds their base
attention's. `tests/unit/parallel/test_kernels.py` recounts real tiny models against these figures.

Contract: pure functions of `ModelCosts` (no torch).
"""

from __future__ import annotations

from typing import NamedTuple

from day0.planner.model import KindCost, ModelCosts

__all__ = [
    "FORWARD_SHARE",
    "SEQUENTIAL_EXPERT_OPS",
    "KernelCounts",
    "LayerKernels",
    "kind_kernels",
    "model_kernels",
    "optimizer_kernels",
    "optimizer_tensors",
]


class LayerKernels(NamedTuple):
    fp32: int  # ops of one forward + backward at fp32
    autocast_extra: int  # casts autocast adds when computing in a 16-bit dtype
    param_tensors: int  # parameter tensors (the optimizer's per-tensor ops)


_LAYERS: dict[tuple[str, bool], LayerKernels] = {
    ("mla", False): LayerKernels(350, 62, 12),  # DeepSeek-V3 dense layer
    ("mla", True): LayerKernels(461, 67, 15),  # DeepSeek-V3 MoE layer (sigmoid group routing, shared expert)
    ("gqa", False): LayerKernels(211, 34, 9),  # Llama 3
    ("gqa", True): LayerKernels(307, 38, 11),  # Qwen3-MoE (q/k norms, softmax top-k)
}
_OUTSIDE = LayerKernels(77, 6, 3)  # embedding, final norm, output head, cross-entropy loss
_OPTIMIZER_FIXED = 21  # foreach clipping (8) and foreach AdamW (13) calls per parameter group
_OPTIMIZER_PER_TENSOR = 2  # AdamW reads each tensor's step count on the host (bias corrections)
FORWARD_SHARE = 0.37  # the forward's share of a layer's forward + backward ops (0.35-0.39 measured)
SEQUENTIAL_EXPERT_OPS = round(6 / FORWARD_SHARE)
"""Ops each local expert adds per forward + backward without grouped GEMMs: Megatron-Core's SequentialMLP
(megatron/core/transformer/moe/experts.py) runs every local expert's MLP in turn, 6 forward ops each (its
rows' slice, fc1, the GLU's chunk, activation and product, fc2), with their backward at the measured
forward share; the counts above are of grouped-GEMM layers, which do not grow with the experts."""


class KernelCounts(NamedTuple):
    """Ops of one forward + backward per micro-batch: a dense layer, what a MoE layer adds to it, and
    the parts outside the layers (counted on the last pipeline stage); the optimizer's ops per step."""

    dense_layer: float
    moe_extra: float
    outside: float
    optimizer: float


def _attention(kind: KindCost) -> str:
    return "mla" if kind.name.split("+")[0].split("-")[0] == "mla" else "gqa"


def kind_kernels(kind: KindCost, compute: str) -> float:
    """Ops of one forward + backward of a layer of `kind` at compute dtype `compute`."""
    k = _LAYERS[(_attention(kind), kind.is_moe)]
    return k.fp32 + (k.autocast_extra if compute != "fp32" else 0)


def optimizer_tensors(costs: ModelCosts) -> int:
    """Parameter tensors of the whole model (what a foreach optimizer loops over without multi-tensor kernels)."""
    tensors = _OUTSIDE.param_tensors - (1 if costs.tied else 0)
    return tensors + sum(
        _LAYERS[(_attention(costs.kinds[i]), costs.kinds[i].is_moe)].param_tensors for i in costs.layer_kind
    )


def optimizer_kernels(costs: ModelCosts) -> float:
    """Ops of one clipping + AdamW step over the whole model's parameter tensors."""
    return _OPTIMIZER_FIXED + _OPTIMIZER_PER_TENSOR * optimizer_tensors(costs)


def model_kernels(costs: ModelCosts, compute: str) -> KernelCounts:
    """The counts the step-time terms read (a model without dense layers still gets its dense-layer
    figure from its attention kind, so `dense_layer + moe_extra` is always a MoE layer's count)."""
    attention = _attention(costs.kinds[0])
    dense = _LAYERS[(attention, False)]
    dense_ops = dense.fp32 + (dense.autocast_extra if compute != "fp32" else 0)
    moe = next((kind_kernels(k, compute) for k in costs.kinds if k.is_moe), dense_ops)
    outside = _OUTSIDE.fp32 + (_OUTSIDE.autocast_extra if compute != "fp32" else 0)
    return KernelCounts(float(dense_ops), float(moe - dense_ops), float(outside), float(optimizer_kernels(costs)))
