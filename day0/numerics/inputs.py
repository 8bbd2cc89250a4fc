"""Seeded inputs for one operator call, rebuilt from a step-1 inventory example.

Why per-op rules: random data is not enough for ops with a contract on their inputs (indices in
range, sorted group offsets, probabilities for a softmax backward) and plain N(0, 1) never reaches
the values where day-0 kernels break: large-magnitude softmax rows (exp overflows without the max
subtraction) and tiny norms (where a wrong epsilon dominates). `edge=True` mixes those in.

Identical inputs on both sides: values are drawn in float64, rounded to the platform dtype, and the
reference gets exactly those rounded values at its own dtype, so the error measured is the op's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from day0.core.dtypes import DTYPES

__all__ = ["Call", "build_call", "call_numel", "cast_call", "example_numel", "shrink_example"]

_SOFTMAX = {"aten::_softmax", "aten::_safe_softmax", "aten::_log_softmax", "aten::softmax.int"}
_POSITIVE = {"aten::rsqrt", "aten::sqrt", "aten::log", "aten::reciprocal"}
_FILL_SCALAR = {"aten::masked_fill.Scalar": 2, "aten::masked_fill_.Scalar": 2, "aten::scalar_tensor": 0,
                "aten::fill_.Scalar": 1, "aten::full": 1, "aten::new_full": 2}
_ALL_DTYPES = DTYPES | {"int64": torch.int64, "int32": torch.int32, "bool": torch.bool, "uint8": torch.uint8,
                       "fp64": torch.float64, "int16": torch.int16, "int8": torch.int8}

Call = tuple[list[Any], dict[str, Any]]


def _is_tensor_desc(v: Any) -> bool:
    return isinstance(v, dict) and set(v) == {"shape", "dtype"}




def _value(v: Any) -> Any:
    if v == "<device>":
        return "cpu"
    if isinstance(v, str) and v.startswith("torch."):
        return getattr(torch, v.removeprefix("torch."), v)
    if isinstance(v, list) and not _is_tensor_desc(v):
        return [_value(x) for x in v]
    return v


def example_numel(example: list[Any]) -> int:
    total = 0
    for v in example:
        if _is_tensor_desc(v):
            total += math.prod(v["shape"])
        elif isinstance(v, list):
            total += example_numel(v)
    return total


def call_numel(op: str, example: list[Any]) -> int:
    """Elements in the inputs plus the outputs of one call, the outputs found by running the op on
    meta tensors (no memory): a creation or expand op can be tiny going in and huge coming out."""
    from day0.numerics.platform_kernels import resolve_op

    def meta(v: Any) -> Any:
        if _is_tensor_desc(v):
            return torch.empty(v["shape"], dtype=_ALL_DTYPES[v["dtype"]], device="meta")
        if isinstance(v, dict) and set(v) == {"kwargs"}:
            return v
        return [meta(x) for x in v] if isinstance(v, list) else _value(v)

    args = [meta(v) for v in example]
    kwargs = {}
    if args and isinstance(args[-1], dict):
        kwargs = {k: _value(v) for k, v in args.pop()["kwargs"].items() if v != "<device>"}
    total = example_numel(example)
    try:
        out = resolve_op(op)(*args, **kwargs)
    except Exception:  # noqa: BLE001 - data-dependent ops have no meta kernel; inputs bound them
        return total
    return total + sum(t.numel() for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor))


def shrink_example(example: list[Any], cap: int, size: Callable[[list[Any]], int] = example_numel) -> list[Any]:
    """Halve the largest dimension size everywhere it appears (shapes and equal int args) until
    `size(example)` is at most `cap`: keeps shape relations (mm's K, split sizes) intact."""
    def remap(v: Any, old: int, new: int) -> Any:
        if _is_tensor_desc(v):
            return {"shape": [new if s == old else s for s in v["shape"]], "dtype": v["dtype"]}
        if isinstance(v, list):
            return [remap(x, old, new) for x in v]
        return new if type(v) is int and v == old else v
    while size(example) > cap:
        dims = [s for v in _tensor_descs(example) for s in v["shape"]] + _size_lists(example)
        big = max(dims, default=1)
        if big <= 1:
            break
        example = remap(example, big, big // 2)
    return example


def _size_lists(v: Any) -> list[int]:
    """Positive ints of int lists (sizes of new_zeros, expand, view ...)."""
    if isinstance(v, list) and v and all(type(x) is int for x in v):
        return [x for x in v if x > 1]
    return [s for x in v for s in _size_lists(x)] if isinstance(v, list) else []


def _tensor_descs(v: Any) -> list[dict[str, Any]]:
    if _is_tensor_desc(v):
        return [v]
    return [d for x in v for d in _tensor_descs(x)] if isinstance(v, list) else []


def _float(shape: list[int], g: torch.Generator, op: str, pos: int, edge: bool) -> torch.Tensor:
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    if op in _POSITIVE:
        x = torch.exp(2 * x)
        if edge and x.numel() >= 4:  # tiny norms: mean(x^2) + eps where eps matters
            flat = x.view(-1)
            flat[::4] = 10 ** (-8 + 3 * torch.rand(flat[::4].shape, generator=g, dtype=torch.float64))
    elif op in _SOFTMAX and pos == 0:
        x = 4 * x
        if edge and x.dim() >= 1 and x.numel() >= 2:  # large-magnitude rows overflow a naive exp
            rows = x.view(-1, x.shape[-1]) if x.shape[-1] else x
            rows[::2] += 100.0
            if op == "aten::_safe_softmax" and rows.shape[-1] > 1:
                rows[1::4, rows.shape[-1] // 2:] = -math.inf
    elif op in ("aten::_softmax_backward_data", "aten::_log_softmax_backward_data") and pos == 1:
        x = torch.softmax(x, -1) if "_log" not in op else torch.log_softmax(x, -1)
    elif op == "aten::nll_loss_forward" and pos == 0 or op == "aten::nll_loss_backward" and pos == 1:
        x = torch.log_softmax(x, -1)
    elif op in ("aten::div.Tensor", "aten::div_.Tensor") and pos == 1:
        x = torch.sign(x) * (x.abs() + 0.5)
    elif op in ("aten::sigmoid", "aten::silu", "aten::exp"):
        x = 3 * x
    return x


def _index_fixups(op: str, args: list[Any], g: torch.Generator) -> None:
    """Give index-like int tensors valid values (in range, unique where duplicates are racy)."""
    def ri(high: int, like: torch.Tensor) -> torch.Tensor:
        return torch.randint(0, max(high, 1), like.shape, generator=g, dtype=like.dtype)

    def unique_along(like: torch.Tensor, size: int, dim: int) -> torch.Tensor:
        if like.dim() == 0 or like.shape[dim] > size:
            return ri(size, like)
        shape = list(like.shape)
        shape[dim] = size
        return torch.rand(shape, generator=g).argsort(dim).narrow(dim, 0, like.shape[dim]).to(like.dtype)

    if op == "aten::embedding":
        args[1] = ri(args[0].shape[0], args[1])
    elif op == "aten::embedding_dense_backward":
        args[1] = ri(int(args[2]), args[1])
    elif op.startswith(("aten::gather", "aten::scatter")) and len(args) > 2:
        dim = int(args[1]) % max(args[0].dim(), 1)
        args[2] = unique_along(args[2], args[0].shape[dim], dim)
    elif op == "aten::index.Tensor":
        args[1] = [ri(args[0].shape[i], t) if isinstance(t, torch.Tensor) else t for i, t in enumerate(args[1])]
    elif op.startswith("aten::index_put"):
        # unique rows: the model's index_put scatters a permutation (MoE token order); duplicates
        # would also make non-accumulating writes racy
        args[1] = [(ri(args[0].shape[i], t) if t.dim() != 1 else unique_along(t, args[0].shape[i], 0))
                   if isinstance(t, torch.Tensor) else t for i, t in enumerate(args[1])]
    elif op in ("aten::nll_loss_forward", "aten::nll_loss_backward"):
        logits = args[0] if op.endswith("forward") else args[1]
        t = 1 if op.endswith("forward") else 2
        args[t] = ri(logits.shape[-1], args[t])
    elif op == "aten::_grouped_mm" and len(args) > 2 and isinstance(args[2], torch.Tensor):
        m, groups = args[0].shape[0], args[2].shape[0]
        cuts = torch.sort(torch.randint(0, m + 1, (groups - 1,), generator=g)).values
        args[2] = torch.cat([cuts, torch.tensor([m])]).to(args[2].dtype)
    elif op == "aten::histc" and not args[0].is_floating_point():
        lo, hi = int(args[2]), int(args[3])
        args[0] = torch.randint(lo, hi + 1, args[0].shape, generator=g, dtype=args[0].dtype)


def build_call(op: str, example: list[Any], seed: int = 0, edge: bool = True,
               dtype_for: Callable[[str], torch.dtype] | None = None, device: str = "cpu") -> Call:
    """Seeded inputs for `op` from an inventory example. Floating values are drawn in float64 and
    rounded to `dtype_for(recorded dtype name)` (default: the recorded dtype); floating dtype
    arguments are mapped the same way, so a recorded `dtype=torch.float32` follows the compute dtype."""
    g = torch.Generator().manual_seed(seed)
    to = dtype_for or (lambda name: _ALL_DTYPES[name])
    kwargs: dict[str, Any] = {}
    if example and isinstance(example[-1], dict) and set(example[-1]) == {"kwargs"}:
        kwargs = {k: _value(v) for k, v in example[-1]["kwargs"].items() if v != "<device>"}
        example = example[:-1]
    counter = iter(range(1_000_000))

    def make(v: Any) -> Any:
        if _is_tensor_desc(v):
            dtype = _ALL_DTYPES[v["dtype"]]
            pos = next(counter)
            if dtype.is_floating_point:
                return _float(v["shape"], g, op, pos, edge).to(to(v["dtype"]))
            if dtype == torch.bool:
                return torch.rand(v["shape"], generator=g) < 0.5
            return torch.randint(0, 16, v["shape"], generator=g, dtype=dtype)
        if isinstance(v, list):
            return [make(x) for x in v]
        return _value(v)

    args = [make(v) for v in example]
    if op in _FILL_SCALAR and len(args) > _FILL_SCALAR[op] and args[_FILL_SCALAR[op]] is None:
        args[_FILL_SCALAR[op]] = -math.inf  # JSON stores +-inf as null; -inf is the masking value
    _index_fixups(op, args, g)
    names = {v: k for k, v in _ALL_DTYPES.items()}
    fix = lambda v: to(names[v]) if isinstance(v, torch.dtype) and v.is_floating_point else v  # noqa: E731
    return cast_call(([fix(a) for a in args], {k: fix(v) for k, v in kwargs.items()}), lambda d: d, device)


def cast_call(call: Call, float_dtype: Callable[[torch.dtype], torch.dtype], device: str = "cpu",
              requires_grad: bool = False) -> Call:
    """A fresh copy of `call` with every floating tensor (and floating dtype argument) cast by
    `float_dtype`; floating tensors become autograd leaves if `requires_grad`."""
    def conv(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            if v.is_floating_point():
                return v.detach().to(device=device, dtype=float_dtype(v.dtype), copy=True).requires_grad_(requires_grad)
            return v.to(device).clone()
        if isinstance(v, torch.dtype) and v.is_floating_point:
            return float_dtype(v)
        if isinstance(v, (list, tuple)):
            return type(v)(conv(x) for x in v)
        return v
    args, kwargs = call
    return [conv(a) for a in args], {k: conv(v) for k, v in kwargs.items()}
