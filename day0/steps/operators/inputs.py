"""Sizing one operator call to an element budget before step 2 runs it.

Why outputs count too: a creation or expand op can be tiny going in and huge coming out, so the
budget is on inputs plus outputs, the outputs found by running the op on meta tensors (no memory).
Shrinking halves the largest dimension everywhere it appears, keeping shape relations intact.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import torch

from day0.core.ops import Example, ExampleArg, TensorDesc, example_numel, is_tensor_desc, meta_call, resolve_op

__all__ = ["call_numel", "shrink_example"]


def call_numel(op: str, example: Example) -> int:
    """Elements in the inputs plus the outputs of one call."""
    args, kwargs = meta_call(example)
    total = example_numel(example)
    try:
        out = resolve_op(op)(*args, **kwargs)
    except Exception:  # noqa: BLE001 - data-dependent ops have no meta kernel; inputs bound them
        return total
    return total + sum(t.numel() for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor))


def shrink_example(
    example: Example, cap: int, size: Callable[[Example], int] = example_numel, first: Collection[int] = ()
) -> Example:
    """Halve the largest dimension size everywhere it appears (shapes and equal int args) until
    `size(example)` is at most `cap`: keeps shape relations (mm's K, split sizes) intact. Sizes in
    `first` (a production shape's batch, sequence and token counts) are halved before any other, so
    the widths a kernel sums over stay as released as long as the token dimensions can give."""
    preferred = {s for s in first if s > 1}

    def remap(v: ExampleArg, old: int, new: int) -> ExampleArg:
        if is_tensor_desc(v):
            return {"shape": [new if s == old else s for s in v["shape"]], "dtype": v["dtype"]}
        if isinstance(v, list):
            return [remap(x, old, new) for x in v]
        return new if type(v) is int and v == old else v

    while size(example) > cap:
        dims = [s for v in _tensor_descs(example) for s in v["shape"]] + _size_lists(example)
        big = max([d for d in dims if d in preferred] or dims, default=1)
        if big <= 1:
            break
        example = [remap(v, big, big // 2) for v in example]
        if big in preferred:
            preferred = (preferred - {big}) | ({big // 2} if big // 2 > 1 else set())
    return example


def _size_lists(v: ExampleArg) -> list[int]:
    """Positive ints of int lists (sizes of new_zeros, expand, view ...)."""
    if isinstance(v, list) and v and len(ints := [x for x in v if type(x) is int]) == len(v):
        return [x for x in ints if x > 1]
    return [s for x in v for s in _size_lists(x)] if isinstance(v, list) else []


def _tensor_descs(v: ExampleArg) -> list[TensorDesc]:
    if is_tensor_desc(v):
        return [v]
    return [d for x in v for d in _tensor_descs(x)] if isinstance(v, list) else []
