"""Platform kernels with faults that the per-op check passes and training shows, plus a slow one,
each a `day0.platforms` plugin entry point target (`register(table)`), modelled on real bugs:

- adamw_eps_inside_sqrt: a fused AdamW square root that puts the epsilon under the root,
  `sqrt(v + eps)`, and on the raw second moment (before bias correction), where `v` is ~1e-9 in the
  first steps; on step 2's inputs (order one) it is exact to 1e-8;
- allreduce_sum_not_mean: a collective that returns the sum of the ranks' gradients, not their mean
  (DDP divides before an all-reduce it expects to sum: this one multiplies back by the world size);
- norm_low_precision: the gradient-clipping norm accumulated in bf16 (squares summed at 8 bits of
  mantissa), returned at fp32;
- matmul_20pct_slower: a correct matmul that then stays busy for a fifth of its own CPU time.
"""

from __future__ import annotations

import time

import torch

from day0.platforms.kernels import KernelTable

aten = torch.ops.aten
EPS = 1e-8


def _sqrt_eps_inside(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.sqrt(t + EPS) for t in tensors]


def adamw_eps_inside_sqrt(table: KernelTable) -> None:
    table.register("aten::_foreach_sqrt", _sqrt_eps_inside)


def allreduce_sum_not_mean(table: KernelTable) -> None:
    stock = torch.ops.c10d.allreduce_.default

    def kernel(tensors, process_group, *rest, **kwargs):
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            out = stock(tensors, process_group, *rest, **kwargs)
            out[1].wait()
            world = torch.distributed.get_world_size()
            for t in tensors:
                t.mul_(world)
        return out

    table.register("c10d::allreduce_", kernel)


def _norm_bf16(tensors: list[torch.Tensor], ord: float = 2, dtype=None) -> list[torch.Tensor]:
    out = []
    for t in tensors:
        acc = torch.zeros((), dtype=torch.bfloat16)
        for chunk in (t.detach().reshape(-1).float() ** 2).split(64):
            acc = acc + chunk.sum().to(torch.bfloat16)
        out.append(acc.float().sqrt().to(t.dtype))
    return out


def norm_low_precision(table: KernelTable) -> None:
    table.register("aten::_foreach_norm.Scalar", _norm_bf16)


def matmul_20pct_slower(table: KernelTable) -> None:
    def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        t0 = time.thread_time()
        out = aten.mm.default(a, b)
        stop = time.thread_time() + 0.2 * (time.thread_time() - t0)
        while time.thread_time() < stop:  # busy for a fifth of the matmul's own CPU time
            pass
        return out

    table.register("aten::mm", kernel)


def _foreach_add_scalar_fp16(tensors: list[torch.Tensor], scalar: float) -> None:
    for t in tensors:
        t.add_(float(torch.tensor(scalar, dtype=torch.float16)))


def adamw_eps_fp16_scalar(table: KernelTable) -> None:
    table.register("aten::_foreach_add_.Scalar", _foreach_add_scalar_fp16)


def allreduce_bf16(table: KernelTable) -> None:
    stock = torch.ops.c10d.allreduce_.default

    def kernel(tensors, process_group, *rest, **kwargs):
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            low = [t.to(torch.bfloat16) for t in tensors]
            out = stock(low, process_group, *rest, **kwargs)
            out[1].wait()
            for t, lo in zip(tensors, low, strict=True):
                t.copy_(lo)
        return tensors, out[1]

    table.register("c10d::allreduce_", kernel)


def matmul_reference(table: KernelTable) -> None:
    """The correct matmul `matmul_20pct_slower` is timed against (the same dispatch path, no delay)."""
    table.register("aten::mm", lambda a, b: aten.mm.default(a, b))
