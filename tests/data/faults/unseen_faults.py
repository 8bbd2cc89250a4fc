"""Faults of the catalogue's kinds that the catalogue does not hold, so the matrix test can show the
detection does not depend on knowing the fault (`day0.platforms` plugin targets, like the others):

- silu_as_hardswish: SiLU computed as the piecewise-linear hard-swish (a vendor's fast-math
  activation);
- adamw_update_drops_eps: the parameter update divides by sqrt(v) + eps - eps (a fused kernel that
  takes the epsilon back out: 0/0 where v = 0);
- allreduce_one_rank: the all-reduce keeps only this rank's gradient (a collective that never
  exchanged), times the world size the way DDP divides it back.
"""

from __future__ import annotations

import torch

from day0.core.training import ADAMW_EPS
from day0.platforms.kernels import KernelTable

aten = torch.ops.aten


def silu_as_hardswish(table: KernelTable) -> None:
    table.register("aten::silu", lambda x: x * (x / 6 + 0.5).clamp(0, 1))


def _addcdiv_drops_eps(self: list[torch.Tensor], t1: list[torch.Tensor], t2: list[torch.Tensor], scalars) -> None:
    for p, m, d, s in zip(self, t1, t2, scalars, strict=True):
        p.add_(m / (d - ADAMW_EPS), alpha=float(s))


def adamw_update_drops_eps(table: KernelTable) -> None:
    table.register("aten::_foreach_addcdiv_.ScalarList", _addcdiv_drops_eps)


def allreduce_one_rank(table: KernelTable) -> None:
    stock = torch.ops.c10d.allreduce_.default

    def kernel(tensors, process_group, *rest, **kwargs):
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            local = [t.clone() for t in tensors]
            out = stock(tensors, process_group, *rest, **kwargs)
            out[1].wait()
            world = torch.distributed.get_world_size()
            for t, mine in zip(tensors, local, strict=True):
                t.copy_(mine * world)  # DDP pre-divided by the world size: this rank's own gradient
        return out

    table.register("c10d::allreduce_", kernel)
