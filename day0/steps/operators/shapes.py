"""Step 2 at the shapes production runs: the accumulating ops (GEMMs, grouped GEMMs, reductions,
norms, softmax, attention, scatter/index_put) checked again as step 1 captured them at the trial's and
the training's tokens per rank, within a memory and a time budget (`validation.production_elements`,
`validation.production_seconds`).

Why: the inventory's own checks run at the capture's 1 x 16 tokens. A kernel that is wrong only at
production sizes (a tiled fast path taken above some M) passes them, and the trial's loss curve misses
any fault smaller than bf16's own spread. Only accumulating ops are repeated: an elementwise kernel
rounds each element once at any size. A call over the element budget is sliced, its token dimensions
halved first (`inputs.shrink_example`), so the widths it sums over stay as released.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import BaseModel

from day0.core.ops import OpInventory
from day0.platforms.kernels import Platform
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.op_policy import accumulates
from day0.steps.operators.opcheck import check_op
from day0.steps.operators.result import ShapeCheck, TokenShape

__all__ = ["ShapeInventory", "check_shapes"]


class ShapeInventory(BaseModel):
    """Step 1's capture of one training step at a production shape."""

    shape: TokenShape
    inventory: OpInventory


def check_shapes(
    production: list[ShapeInventory],
    platform: Platform,
    dtype: str,
    validation: ValidationSpec,
    say: Callable[[str], None] = lambda _msg: None,
) -> list[ShapeCheck]:
    """Each shape's accumulating ops on `platform` at `dtype` (one seed, values only: the backward's
    kernels are inventory ops of their own); the ops left when `validation.production_seconds` is
    spent are listed as not checked."""
    deadline = time.perf_counter() + validation.production_seconds
    results = []
    for item in production:
        start, shape, inventory = time.perf_counter(), item.shape, item.inventory
        tokens = {shape.batch, shape.seq_len, shape.batch * shape.seq_len}
        records = [r for r in inventory.ops if accumulates(r.op)]
        say(f"{len(records)} accumulating ops at {shape}")
        result = ShapeCheck(shape=shape, max_elements=validation.production_elements)
        for record in records:
            if time.perf_counter() > deadline:
                result.not_checked.append(record.op)
                continue
            result.checks.append(
                check_op(
                    record,
                    platform,
                    dtype,
                    validation,
                    inventory.compute_dtype,
                    max_elements=validation.production_elements,
                    grads=False,
                    shrink_first=tokens,
                )
            )
        result.seconds = time.perf_counter() - start
        results.append(result)
    return results
