"""Subtly wrong kernels for a test platform, each a `day0.platforms` plugin entry point target
(`register(table)`), modelled on real day-0 kernel bugs:

- softmax_without_max: exp(x) / sum(exp(x)) at the input dtype, no max subtraction (overflows on
  large logits);
- rmsnorm_wrong_eps: rsqrt with a fused RMSNorm epsilon of 1e-5 baked in (the model asks 1e-6);
- matmul_low_precision: mm accumulating its K dimension in bf16 chunks;
- sigmoid_wrong_fp32: sigmoid through a low-order exp approximation, in the fp32 kernel only;
- embedding_shifted_fp32: the fp32 embedding gather reads the row after the token's, in the fp32
  kernel only (a bf16 model's capture never calls it; the trial's fp32 weights under autocast do);
- adamw_lerp_drops_term: AdamW's first-moment update `m += w * (g - m)` as `m += w * g`, the
  `- w * m` term dropped (an optimizer kernel: only the optimizer part of the inventory sees it).
"""

from __future__ import annotations

import torch

from day0.platforms.kernels import KernelTable

aten = torch.ops.aten


def _naive_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    e = torch.exp(x)
    return e / e.sum(dim, keepdim=True)


def softmax_without_max(table: KernelTable) -> None:
    table.register("aten::_softmax", lambda x, dim, half_to_float: _naive_softmax(x, dim))
    table.register("aten::_safe_softmax", lambda x, dim, dtype=None: _naive_softmax(x, dim))


def rmsnorm_wrong_eps(table: KernelTable) -> None:
    table.register("aten::rsqrt", lambda x: 1.0 / torch.sqrt(x + 1e-5))


def _lowprec_mm(a: torch.Tensor, b: torch.Tensor, chunk: int = 8) -> torch.Tensor:
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.bfloat16)
    a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16)
    for k in range(0, a.shape[1], chunk):
        acc = (acc.float() + a16[:, k : k + chunk].float() @ b16[k : k + chunk].float()).to(torch.bfloat16)
    return acc.to(a.dtype)


def matmul_low_precision(table: KernelTable) -> None:
    table.register("aten::mm", _lowprec_mm)


def sigmoid_wrong_fp32(table: KernelTable) -> None:
    table.register("aten::sigmoid", lambda x: 1.0 / (1.0 + (1.0 - x / 256.0) ** 256), dtypes=["fp32"])


def embedding_shifted_fp32(table: KernelTable) -> None:
    def embedding(weight: torch.Tensor, indices: torch.Tensor, *args: object) -> torch.Tensor:
        return aten.embedding.default(weight, (indices + 1) % weight.shape[0], *args)

    table.register("aten::embedding", embedding, dtypes=["fp32"])


def _lerp_without_decay(self: list[torch.Tensor], end: list[torch.Tensor], weight: float) -> None:
    for m, g in zip(self, end, strict=True):
        m.add_(g, alpha=weight)


def adamw_lerp_drops_term(table: KernelTable) -> None:
    table.register("aten::_foreach_lerp_.Scalar", _lerp_without_decay)


def plugin_grouped_mm(table: KernelTable) -> None:
    """A correct vendor kernel for aten::_grouped_mm with offsets, from plain matmuls: 2D x 3D (groups
    of rows, the MoE forward) and 2D x 2D (groups along K, the weight gradient)."""

    def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, bias=None, out_dtype=None):
        bounds = [0, *offs.tolist()]
        if b.dim() == 3:
            out = a.new_zeros(a.shape[0], b.shape[-1])
            for g in range(len(bounds) - 1):
                out[bounds[g] : bounds[g + 1]] = (a[bounds[g] : bounds[g + 1]].float() @ b[g].float()).to(a.dtype)
            return out
        return torch.stack(
            [
                (a[:, bounds[g] : bounds[g + 1]].float() @ b[bounds[g] : bounds[g + 1]].float()).to(a.dtype)
                for g in range(len(bounds) - 1)
            ]
        )

    table.register("aten::_grouped_mm", grouped_mm)
