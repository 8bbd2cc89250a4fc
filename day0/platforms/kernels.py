"""The platform side of a numerical check: which aten kernels it has, and a dispatch mode that
runs ops the way that platform would.

Why a `TorchDispatchMode`: it sits below autograd, exactly where a device backend's kernels sit, so
a replaced forward kernel is still differentiated by the real derivative formula and the backward
ops go through the platform's kernels too. The mode routes each aten overload to, in order:
1. an entry of the platform's `KernelTable` (vendor kernels, plugin kernels, step-2 adaptations);
2. the stock kernel, if the platform's operator library has the op at that dtype;
3. otherwise raises `MissingKernelError`: what a day-0 platform does for an op it lacks.
Ops outside `aten` (the collectives of `c10d`, which a training run's DDP all-reduce calls) are the
distributed backend's, not the operator library's: stock unless the table has a kernel for them.

Vendor and extra kernels come from the entry-point group `day0.platforms`: an entry point names a
callable `register(table: KernelTable) -> None`; never a hard import of a vendor package.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import TypeAlias

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from day0.core.dtypes import DTYPES, dtype_name
from day0.core.ops import (
    Example,
    describe_call,
    is_composite_implicit,
    op_name,
    resolve_op,
)
from day0.errors import PluginError
from day0.platforms.libraries.model import ResolvedLibrary
from day0.platforms.libraries.resolve import resolve_library
from day0.spec.cluster import PlatformSpec

__all__ = [
    "ENTRY_POINT_GROUP",
    "Kernel",
    "KernelEntry",
    "KernelTable",
    "MissingKernelError",
    "Platform",
    "PlatformMode",
    "call_dtype",
    "device_available",
    "device_count",
    "load_plugin_kernels",
    "load_vendor_plugin",
]

ENTRY_POINT_GROUP = "day0.platforms"
_DISPATCHER_MISSING = "Could not run '"
"""How the dispatcher starts its error for an op with no kernel for the device's dispatch key."""

Kernel: TypeAlias = Callable[..., object]
"""An aten kernel: called with its op's arguments, returns what the op returns."""


class MissingKernelError(NotImplementedError):
    """The platform has no kernel for this op at this dtype. `op` and `example` (the call in the
    op-call notation of `day0.core.ops`) let step 2 adapt an op it only meets at run time."""

    def __init__(self, message: str, op: str = "", example: Example | None = None, dtype: str | None = None) -> None:
        super().__init__(message)
        self.op, self.example, self.dtype = op, example, dtype


def call_dtype(args: object) -> str | None:
    """The dtype a call runs at: its first floating tensor input, else its first tensor."""
    tensors = [t for t in tree_leaves(args) if isinstance(t, torch.Tensor)]
    floating = [t for t in tensors if t.dtype.is_floating_point]
    return dtype_name((floating or tensors)[0].dtype) if tensors else None


@dataclass(frozen=True)
class KernelEntry:
    fn: Kernel = field(repr=False)
    source: str = "vendor"
    dtypes: frozenset[str | None] | None = None
    reenter: bool = False
    """Run `fn` under the platform mode, so its own aten calls are platform ops (decompositions)."""


class KernelTable:
    """op name -> kernels, each optionally limited to some dtypes (a kernel wrong for one dtype)."""

    def __init__(self) -> None:
        self._entries: dict[str, list[KernelEntry]] = {}

    def register(
        self,
        op: str,
        fn: Kernel,
        *,
        source: str = "vendor",
        dtypes: Iterable[str | None] | None = None,
        reenter: bool = False,
    ) -> None:
        resolve_op(op)
        entry = KernelEntry(fn, source, frozenset(dtypes) if dtypes is not None else None, reenter)
        self._entries.setdefault(op, []).insert(0, entry)  # later registrations win

    def lookup(self, op: str, dtype: str | None) -> KernelEntry | None:
        for e in self._entries.get(op, ()):
            if e.dtypes is None or dtype in e.dtypes:
                return e
        return None

    def ops(self) -> list[str]:
        return sorted(self._entries)

    def copy(self) -> KernelTable:
        new = KernelTable()
        new._entries = {k: list(v) for k, v in self._entries.items()}
        return new


def load_plugin_kernels(eps: Iterable[EntryPoint] | None = None, names: Iterable[str] | None = None) -> KernelTable:
    """Kernels from plugins in `day0.platforms` (all, or those named), or from explicit entry points."""
    if eps is None:
        found = entry_points(group=ENTRY_POINT_GROUP)
        eps = [ep for ep in found if names is None or ep.name in set(names)]
    table = KernelTable()
    for ep in eps:
        sub = KernelTable()
        ep.load()(sub)
        for op, entries in sub._entries.items():
            for e in reversed(entries):
                table.register(op, e.fn, source=f"plugin:{ep.name}", dtypes=e.dtypes, reenter=e.reenter)
    return table


def load_vendor_plugin(spec: PlatformSpec) -> KernelTable:
    """The kernels of the platform's vendor plugin, loading it (which registers its device with torch).
    A plugin whose import raises is a `PluginError` naming it and its error: the device must not
    quietly become a host emulation."""
    try:
        return load_plugin_kernels(names=[spec.vendor_plugin] if spec.vendor_plugin else [])
    except Exception as exc:
        where = [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == spec.vendor_plugin]
        raise PluginError(
            f"platform {spec.name}: vendor plugin {spec.vendor_plugin!r} ({', '.join(where)}) failed to load: "
            f"{type(exc).__name__}: {str(exc)[:300]}"
        ) from exc


@dataclass
class Platform:
    """A platform as step 2 sees it: a device, an operator library and a kernel table."""

    name: str
    device: str = "cpu"
    library: ResolvedLibrary | None = None
    """The operator library read from the vendor's packages; None = 'probe' (every stock kernel)."""
    kernels: KernelTable = field(default_factory=KernelTable)
    emulated_on: str | None = None
    """Set when the device type is not present here and the library runs on the host CPU."""
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_spec(cls, spec: PlatformSpec, plugins: Iterable[EntryPoint] | None = None) -> Platform:
        library = None if spec.operator_library == "probe" else resolve_library(spec.operator_library)
        kernels, notes = KernelTable(), []
        if plugins is not None:
            kernels = load_plugin_kernels(plugins)
        elif spec.vendor_plugin:
            if not any(ep.name == spec.vendor_plugin for ep in entry_points(group=ENTRY_POINT_GROUP)):
                notes.append(
                    f"vendor plugin {spec.vendor_plugin!r} is not installed (no '{ENTRY_POINT_GROUP}' "
                    "entry point): stock kernels stand in for the vendor's"
                )
            kernels = load_vendor_plugin(spec)
        device, emulated = spec.device_type, None
        if device != "cpu" and not device_available(device):
            device, emulated = "cpu", spec.device_type
        return cls(spec.name, device, library, kernels, emulated, notes)

    def declares(self, op: str, dtype: str | None) -> bool:
        if self.library is None or is_composite_implicit(op):
            return True
        entry = self.library.ops.get(op)
        if entry is None:
            return False
        # dtypes nobody states (None) are not refused here: step 2 runs the op and its check decides;
        # integer calls are not dtype-restricted
        return entry.dtypes is None or dtype not in DTYPES or dtype in entry.dtypes

    def supports(self, op: str, dtype: str | None) -> bool:
        return self.kernels.lookup(op, dtype) is not None or self.declares(op, dtype)

    def mode(self) -> PlatformMode:
        return PlatformMode(self)


def device_available(device_type: str) -> bool:
    module = getattr(torch, device_type, None)
    return bool(module is not None and getattr(module, "is_available", lambda: False)())


def device_count(device_type: str) -> int:
    """Devices of `device_type` this host's torch sees (0 where its plugin is absent or finds none)."""
    module = getattr(torch, device_type, None)
    return int(module.device_count()) if device_available(device_type) and module is not None else 0


class PlatformMode(TorchDispatchMode):
    """Runs every aten call as `platform` would; counts which kernel served each op."""

    def __init__(self, platform: Platform) -> None:
        super().__init__()
        self.platform = platform
        self.served: Counter[tuple[str, str]] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
        dtype = call_dtype((args, kwargs))
        entry = self.platform.kernels.lookup(name, dtype)
        if entry is not None:
            self.served[(name, entry.source)] += 1
            if entry.reenter:
                with self:
                    return entry.fn(*args, **kwargs)
            return entry.fn(*args, **kwargs)
        if name.startswith("aten::") and not self.platform.declares(name, dtype):
            example = describe_call(args, kwargs)
            raise MissingKernelError(f"{self.platform.name}: no kernel for {name} at {dtype}", name, example, dtype)
        try:
            out = func(*args, **kwargs)
        except NotImplementedError as exc:
            # A real device's dispatcher has no kernel for the op (or for one it calls): the same gap
            # a declared library shows, so step 2 adapts it like any other missing op.
            said = (str(exc).splitlines() or [""])[0].split(". ")[0]  # "Could not run '...' with ... backend"
            if not said.startswith(_DISPATCHER_MISSING):
                raise
            message = f"{self.platform.name}: no kernel for {name} at {dtype} ({said[:160]})"
            raise MissingKernelError(message, name, describe_call(args, kwargs), dtype) from exc
        self.served[(name, "stock")] += 1
        return out
