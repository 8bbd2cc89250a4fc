"""Kernels that adapt an op a platform lacks or gets wrong, built from data: step 2 makes them while
it checks (`day0.steps.operators.adapt`), the trial rebuilds the same ones from step 2's result so the
candidate trains on what step 2 verified (`AdaptedKernel`, `apply_adaptations`).

Strategies, cheapest first (`STRATEGIES`):
- plugin: a kernel offered by a `day0.platforms` entry point (a vendor's or our own library);
- decomposition: `torch._decomp`'s decomposition, run *on the platform* (its sub-ops must exist
  there), cost = extra kernel launches / memory passes;
- upcast: run at fp32 on the platform and cast back (no bf16/int kernel, or an inaccurate one);
- cpu_fallback: copy to the host, run the stock CPU kernel, copy back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch._decomp import decomposition_table
from torch.utils._pytree import tree_leaves, tree_map

from day0.core.dtypes import ALL_DTYPES, DTYPES
from day0.core.ops import resolve_op
from day0.platforms.kernels import Kernel, KernelEntry, KernelTable, MissingKernelError, Platform, load_plugin_kernels

__all__ = [
    "STRATEGIES",
    "AdaptedKernel",
    "Strategy",
    "apply_adaptations",
    "make_kernel",
    "upcast_kernel",
    "write_back",
]

Strategy = Literal["plugin", "decomposition", "upcast", "cpu_fallback"]
STRATEGIES: tuple[Strategy, ...] = ("plugin", "decomposition", "upcast", "cpu_fallback")
_INT_CALLS: list[str | None] = [*sorted(set(ALL_DTYPES) - set(DTYPES)), None]
"""What an adaptation at 'int' serves: integer calls, and calls with no tensor input (`aten::ones`)."""
_active = threading.local()


def write_back(func: torch._ops.OpOverload, args: Sequence[object], copies: Sequence[object], out: object) -> object:
    """After running `func` on copies of its arguments (cast or moved), copy what it mutated back
    into the caller's tensors and return those for the aliasing outputs: in-place ops stay in-place."""
    written = [
        i
        for i, a in enumerate(func._schema.arguments[: len(args)])
        if a.alias_info is not None and a.alias_info.is_write
    ]
    for i in written:
        given, copied = args[i], copies[i]
        pairs = (
            zip(given, copied, strict=True)
            if isinstance(given, (list, tuple)) and isinstance(copied, (list, tuple))
            else [(given, copied)]
        )
        for arg, copy in pairs:  # a foreach op writes a tensor list
            if isinstance(arg, torch.Tensor) and isinstance(copy, torch.Tensor) and copy is not arg:
                arg.copy_(copy)
                out = tree_map(lambda o, c=copy, a=arg: a if o is c else o, out)
    return out


def upcast_kernel(func: torch._ops.OpOverload, to: torch.dtype = torch.float32) -> Kernel:
    """`func` run at `to`: floating inputs (or, for integer-only calls, the integer ones) are cast up,
    floating outputs cast back to the call's dtype. The reference for an integer op the host lacks
    (histc on int32), and step 2's upcast adaptation."""

    def kernel(*args: object, **kwargs: object) -> object:
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        back = tensors[0].dtype if tensors else None
        any_float = any(t.is_floating_point() for t in tensors)
        up = tree_map(
            lambda a: (
                a.to(to)
                if isinstance(a, torch.Tensor) and (a.is_floating_point() or (not any_float and a.dtype != torch.bool))
                else a
            ),
            (args, kwargs),
        )
        out = write_back(func, args, up[0], func(*up[0], **up[1]))
        return tree_map(
            lambda o: (
                o.to(back)
                if isinstance(o, torch.Tensor) and o.is_floating_point() and back is not None and o.dtype != back
                else o
            ),
            out,
        )

    return kernel


def _no_recursion(op: str, fn: Kernel) -> Kernel:
    """A decomposition that calls its own op again is no decomposition on this platform."""

    def kernel(*args: object, **kwargs: object) -> object:
        stack: set[str] = getattr(_active, "ops", set())
        if op in stack:
            raise MissingKernelError(f"decomposition of {op} calls {op} again")
        _active.ops = stack | {op}
        try:
            return fn(*args, **kwargs)
        finally:
            _active.ops = stack

    return kernel


def _fallback(func: torch._ops.OpOverload, device: str) -> Kernel:
    def kernel(*args: object, **kwargs: object) -> object:
        host = tree_map(lambda a: a.to("cpu") if isinstance(a, torch.Tensor) else a, (args, kwargs))
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():  # the stock host kernel, not the platform's
            try:
                out = func(*host[0], **host[1])
            except RuntimeError:  # the host lacks it at this dtype too (histc on int32): at fp32
                out = upcast_kernel(func)(*host[0], **host[1])
            out = write_back(func, args, host[0], out)
        return tree_map(lambda o: o.to(device) if isinstance(o, torch.Tensor) else o, out)

    return kernel


def make_kernel(
    strategy: str, op: str, platform: Platform, dtype: str, plugins: KernelTable | None = None
) -> tuple[KernelEntry | None, str]:
    """(kernel, note). kernel None means the strategy does not apply; note says why."""
    func = resolve_op(op)
    if strategy == "plugin":
        entry = plugins.lookup(op, dtype) if plugins else None
        return (entry, entry.source if entry else "no plugin offers a kernel")
    if strategy == "decomposition":
        fn = decomposition_table.get(func)
        if fn is None:
            return None, "no decomposition in torch._decomp"
        return KernelEntry(_no_recursion(op, fn), "adapt:decomposition", reenter=True), "torch._decomp"
    if strategy == "upcast":
        if dtype == "fp32":
            return None, "already fp32"
        if not platform.supports(op, "fp32"):
            return None, "no fp32 kernel to upcast to"
        return KernelEntry(upcast_kernel(func), "adapt:upcast", reenter=True), f"{dtype} -> fp32 -> {dtype}"
    if strategy == "cpu_fallback":
        return KernelEntry(_fallback(func, platform.device), "adapt:cpu_fallback"), "host CPU kernel"
    raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")


class AdaptedKernel(BaseModel):
    """One of step 2's adaptations as data: enough to register the same kernel again elsewhere."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: str = Field(description="aten overload, e.g. aten::_grouped_mm.")
    dtype: str = Field(description="Dtype it was adapted at ('int' for integer-only calls).")
    strategy: Strategy
    plugin: str | None = Field(None, description="Entry point that offered the kernel (strategy plugin).")

    def describe(self) -> str:
        via = f"plugin:{self.plugin}" if self.plugin else self.strategy
        return f"{self.op}@{self.dtype}={via}"


def apply_adaptations(platform: Platform, adaptations: Iterable[AdaptedKernel]) -> list[str]:
    """Register each adaptation's kernel in `platform`'s table, as step 2 did after its re-check;
    returns one note per adaptation that cannot be rebuilt here (its plugin is not installed).

    A host fallback or a decomposition computes the op the same way at any dtype, so it serves every
    dtype (a training run calls ops at dtypes a pure-dtype check does not: autocast keeps some at
    fp32, the optimizer updates fp32 master weights); an upcast serves the dtype it was made for, a
    plugin kernel the dtypes its plugin declares."""
    notes: list[str] = []
    for a in adaptations:
        plugins = load_plugin_kernels(names=[a.plugin]) if a.plugin else None
        # an integer op's upcast is made for 'int' (at 'fp32' it would be refused as already fp32)
        at = a.dtype if a.dtype != "int" or a.strategy == "upcast" else "fp32"
        entry, note = make_kernel(a.strategy, a.op, platform, at, plugins)
        if entry is None:
            notes.append(f"adaptation {a.describe()} not rebuilt: {note}")
            continue
        source = entry.source if a.strategy == "plugin" else f"adapt:{a.strategy}"
        only: Iterable[str | None] | None = _INT_CALLS if a.dtype == "int" else [a.dtype]
        if a.strategy in ("cpu_fallback", "decomposition"):
            only = None
        elif a.strategy == "plugin":
            only = entry.dtypes
        platform.kernels.register(a.op, entry.fn, source=source, dtypes=only, reenter=entry.reenter)
    return notes
