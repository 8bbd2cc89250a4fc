"""The op-call notation every step shares: how an aten call is named, written down and rebuilt.

- An operator is named by its overload, `aten::add.Tensor` (`aten::mm` for the default overload);
  a platform library entry without an overload (`aten::sum`) stands for all of them.
- A call is recorded as an *example*: its argument list with tensors as `{shape, dtype}` (dtype
  names of `day0.core.dtypes`), devices as `'<device>'`, dtypes/layouts as `'torch.x'`, other
  values as is, and keyword arguments, if any, as a trailing `{'kwargs': {...}}` element.
- `OpInventory` (step 1's capture) holds one `OpRecord` per operator with a few examples.
- `build_call` rebuilds a runnable call from an example with seeded values that respect each op's
  input contract (indices in range, sorted group offsets, log-probabilities for nll_loss, positive
  AdamW denominators ...); a tensor list (a foreach op's argument) is rebuilt tensor by tensor.
  `edge=True` mixes in the values where day-0 kernels break: large-magnitude softmax rows (exp
  overflows without the max subtraction) and tiny norms (where a wrong epsilon dominates).

Values are drawn in float64 and rounded to the call's dtype, so a reference that gets the same call
cast up (`cast_call`) sees exactly the platform's rounded inputs: the error measured is the op's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, TypedDict, TypeGuard

import torch
from pydantic import BaseModel, Field, JsonValue

from day0.core.dtypes import ALL_DTYPES, dtype_name

__all__ = [
    "Call",
    "DtypeConstraint",
    "Example",
    "ExampleArg",
    "OpArg",
    "OpInventory",
    "OpRecord",
    "TensorDesc",
    "build_call",
    "cast_call",
    "describe",
    "describe_call",
    "example_numel",
    "is_composite_implicit",
    "is_tensor_desc",
    "meta_call",
    "op_name",
    "resolve_op",
]

OpArg: TypeAlias = Any
"""One argument (or result) of an aten call: a tensor, a tensor list, a scalar, a dtype, a device,
None...: each op's schema decides, so the value is open."""
ExampleArg: TypeAlias = JsonValue
"""One argument in the notation (module doc): a tensor description, a string, a number, None, a
list or a keyword mapping of them, as captured or read back from JSON (`is_tensor_desc` tells a tensor)."""
Example: TypeAlias = list[ExampleArg]
"""One call in the notation: its arguments, keyword arguments as a trailing `{'kwargs': {...}}`."""
Call = tuple[list[OpArg], dict[str, OpArg]]
"""Positional and keyword arguments of one call."""


class TensorDesc(TypedDict):
    """A tensor in the notation."""

    shape: list[int]
    dtype: str


class OpRecord(BaseModel):
    op: str = Field(description="Overload name, e.g. 'aten::mm' or 'aten::add.Tensor'.")
    calls: int = 0
    phases: list[str] = Field(
        default=[], description="Where in the training step it runs: 'forward', 'backward', 'optimizer'."
    )
    dtypes: list[str] = Field(default=[], description="Floating dtypes of tensor inputs.")
    modules: list[str] = Field(default=[], description="Where it runs, e.g. 'layers.1 (mla+moe)'.")
    examples: list[Example] = Field(default=[], description="Calls in the op-call notation (module doc).")


class DtypeConstraint(BaseModel):
    op: str
    dtype: str
    message: str
    ran_at: str = "bf16"


class OpInventory(BaseModel):
    compute_dtype: str
    seq_len: int
    layers_captured: list[str] = Field(description="Which layer kinds the reduced-depth copy holds.")
    ops: list[OpRecord]
    constraints: list[DtypeConstraint]
    capture_seconds: float
    kept_whole: list[str] = Field(
        default=[], description="Decomposable (CIA) ops recorded whole, as the device runs them, not as their pieces."
    )

    def by_name(self) -> dict[str, OpRecord]:
        return {r.op: r for r in self.ops}

    def in_phase(self, phase: str) -> list[OpRecord]:
        """The ops that run in `phase` ('forward', 'backward' or 'optimizer'), alone or not."""
        return [r for r in self.ops if phase in r.phases]


# --- names -------------------------------------------------------------------------------------


def op_name(func: torch._ops.OpOverload) -> str:
    name = func._schema.name  # 'aten::add'
    return f"{name}.{func._overloadname}" if func._overloadname != "default" else name


def resolve_op(name: str) -> torch._ops.OpOverload:
    """'aten::add.Tensor' -> torch.ops.aten.add.Tensor. Raises KeyError for unknown names."""
    ns, _, rest = name.partition("::")
    base, _, overload = rest.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), base), overload or "default")
    except (AttributeError, RuntimeError) as exc:
        raise KeyError(f"unknown operator {name!r}") from exc


def is_composite_implicit(op: str) -> bool:
    """CompositeImplicitAutograd ops decompose before reaching a backend: no device kernel needed."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeImplicitAutograd")
    except RuntimeError:
        return False


# --- writing calls down ------------------------------------------------------------------------


def describe(value: object) -> ExampleArg:
    """One call argument in the notation."""
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": dtype_name(value.dtype)}
    if isinstance(value, torch.device):
        return "<device>"  # captured on meta; probes and checks substitute their own device
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, dict):
        return {k: describe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    if isinstance(value, (int, float, bool, str)) or value is None:
        return value
    return repr(value)


def describe_call(args: Sequence[object], kwargs: dict[str, object]) -> Example:
    return [describe(a) for a in args] + ([{"kwargs": describe(kwargs)}] if kwargs else [])


# --- reading calls back ------------------------------------------------------------------------


def is_tensor_desc(v: object) -> TypeGuard[TensorDesc]:
    return isinstance(v, dict) and set(v) == {"shape", "dtype"}


def _split(example: Example) -> tuple[Example, dict[str, OpArg]]:
    """(positional descriptions, keyword arguments as values; recorded devices dropped)."""
    last = example[-1] if example else None
    if isinstance(last, dict) and set(last) == {"kwargs"} and isinstance(kwargs := last["kwargs"], dict):
        return example[:-1], {k: _value(v) for k, v in kwargs.items() if v != "<device>"}
    return example, {}


def _value(v: ExampleArg) -> OpArg:
    if v == "<device>":
        return "cpu"
    if isinstance(v, str) and v.startswith("torch."):
        return getattr(torch, v.removeprefix("torch."), v)
    if isinstance(v, list) and not is_tensor_desc(v):
        return [_value(x) for x in v]
    return v


def example_numel(example: Example) -> int:
    """Elements in the example's input tensors."""
    total = 0
    for v in example:
        if is_tensor_desc(v):
            total += math.prod(v["shape"])
        elif isinstance(v, list):
            total += example_numel(v)
    return total


def meta_call(example: Example) -> Call:
    """The call on meta tensors: shapes and dtypes only, no memory."""

    def meta(v: ExampleArg) -> OpArg:
        if is_tensor_desc(v):
            return torch.empty(v["shape"], dtype=ALL_DTYPES[v["dtype"]], device="meta")
        return [meta(x) for x in v] if isinstance(v, list) else _value(v)

    positional, kwargs = _split(example)
    return [meta(v) for v in positional], kwargs


# --- seeded values (build_call) ----------------------------------------------------------------

_SOFTMAX = {"aten::_softmax", "aten::_safe_softmax", "aten::_log_softmax", "aten::softmax.int"}
_POSITIVE = {"aten::rsqrt", "aten::sqrt", "aten::log", "aten::reciprocal", "aten::_foreach_sqrt"}
_POSITIVE_ARG = {"aten::_foreach_addcdiv_.ScalarList": 2, "aten::_foreach_addcdiv_.Tensor": 2, "aten::addcdiv_": 2}
"""Ops whose argument at this position is positive in training: AdamW's denominator sqrt(v) + eps."""
_FILL_SCALAR = {
    "aten::masked_fill.Scalar": 2,
    "aten::masked_fill_.Scalar": 2,
    "aten::scalar_tensor": 0,
    "aten::fill_.Scalar": 1,
    "aten::full": 1,
    "aten::new_full": 2,
}


def _float(shape: list[int], g: torch.Generator, op: str, pos: int, edge: bool) -> torch.Tensor:
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    if op in _POSITIVE or _POSITIVE_ARG.get(op) == pos:
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
                rows[1::4, rows.shape[-1] // 2 :] = -math.inf
    elif op in ("aten::_softmax_backward_data", "aten::_log_softmax_backward_data") and pos == 1:
        x = torch.softmax(x, -1) if "_log" not in op else torch.log_softmax(x, -1)
    elif (op == "aten::nll_loss_forward" and pos == 0) or (op == "aten::nll_loss_backward" and pos == 1):
        x = torch.log_softmax(x, -1)
    elif op in ("aten::div.Tensor", "aten::div_.Tensor") and pos == 1:
        x = torch.sign(x) * (x.abs() + 0.5)
    elif op in ("aten::sigmoid", "aten::silu", "aten::exp"):
        x = 3 * x
    return x


def _index_fixups(op: str, args: list[OpArg], g: torch.Generator) -> None:
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
        args[1] = [
            (ri(args[0].shape[i], t) if t.dim() != 1 else unique_along(t, args[0].shape[i], 0))
            if isinstance(t, torch.Tensor)
            else t
            for i, t in enumerate(args[1])
        ]
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


def build_call(
    op: str,
    example: Example,
    seed: int = 0,
    edge: bool = True,
    dtype_for: Callable[[str], torch.dtype] | None = None,
    device: str = "cpu",
) -> Call:
    """Seeded inputs for `op` from an inventory example. Floating values are drawn in float64 and
    rounded to `dtype_for(recorded dtype name)` (default: the recorded dtype); floating dtype
    arguments are mapped the same way, so a recorded `dtype=torch.float32` follows the compute dtype."""
    g = torch.Generator().manual_seed(seed)
    to = dtype_for or (lambda name: ALL_DTYPES[name])
    example, kwargs = _split(example)
    counter = iter(range(1_000_000))

    def make(v: ExampleArg, arg: int | None = None) -> OpArg:
        if is_tensor_desc(v):
            dtype = ALL_DTYPES[v["dtype"]]
            pos = next(counter)
            if dtype.is_floating_point:
                # a tensor list (foreach ops) is one argument: its tensors share its position
                return _float(v["shape"], g, op, pos if arg is None else arg, edge).to(to(v["dtype"]))
            if dtype == torch.bool:
                return torch.rand(v["shape"], generator=g) < 0.5
            return torch.randint(0, 16, v["shape"], generator=g, dtype=dtype)
        if isinstance(v, list):
            return [make(x, arg) for x in v]
        return _value(v)

    args = [make(v, i if isinstance(v, list) else None) for i, v in enumerate(example)]
    if op in _FILL_SCALAR and len(args) > _FILL_SCALAR[op] and args[_FILL_SCALAR[op]] is None:
        args[_FILL_SCALAR[op]] = -math.inf  # JSON stores +-inf as null; -inf is the masking value
    _index_fixups(op, args, g)

    def fix(v: OpArg) -> OpArg:
        return to(dtype_name(v)) if isinstance(v, torch.dtype) and v.is_floating_point else v

    return cast_call(([fix(a) for a in args], {k: fix(v) for k, v in kwargs.items()}), lambda d: d, device)


def cast_call(
    call: Call, float_dtype: Callable[[torch.dtype], torch.dtype], device: str = "cpu", requires_grad: bool = False
) -> Call:
    """A fresh copy of `call` with every floating tensor (and floating dtype argument) cast by
    `float_dtype`; floating tensors become autograd leaves if `requires_grad`."""

    def conv(v: OpArg) -> OpArg:
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
