"""Probing a device: what the dispatcher would run for each inventoried op under the device's
dispatch key, then one seeded call per needed dtype where the device is usable.

The dispatcher's computed table (`torch._C._dispatch_dump_table`, the entries
`computeDispatchTableEntryWithDebug` resolved) says, for a backend key K and its autograd key:
- `vendor_kernel`: a kernel registered for K, or for Autograd<K> on a CompositeImplicitAutograd (CIA)
  op the backend overrides (torch_npu's `softmax.int`, `scaled_dot_product_attention` ...);
- `decomposes`: the CIA kernel, which runs above the backend and reaches it as other ops;
- `default_backend`: a CompositeExplicitAutograd(NonFunctional) kernel every backend gets. A
  structured op's NonFunctional default calls its `.out` overload on the same key (`mm` calls
  `mm.out`), so it serves K only when that overload has a kernel for K; else the op is missing;
- `missing`: nothing for K, or only K's boxed backend fallback unless a call through it ran (then
  `default_backend`); one that could not be run is `missing`, and says so.
The CUDA table is the torch build's own (no GPU needed to read it); PrivateUse1's is whatever vendor
plugin is imported (`import torch` itself loads an installed one that declares a `torch.backends`
entry point: torch's device-backend autoload). Each needed dtype a call ran on the device is
`proven`; a kernel that rejects a dtype (the CPU's Cholesky at fp16) makes the op `dtype_unsupported`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from day0.core.dtypes import DTYPES
from day0.core.ops import OpInventory, OpRecord, build_call, example_numel, op_name, resolve_op
from day0.platforms.kernels import device_available
from day0.steps.analyze.coverage import CoverageReport, OpCoverage, Status

__all__ = ["Dispatch", "dispatch_key", "dispatch_status", "probe_device", "whole_ops"]

_CIA = "CompositeImplicitAutograd"
_NON_FUNCTIONAL = "CompositeExplicitAutogradNonFunctional"
_DTYPE_WORDS = ("not implemented for", "dtype", "Float", "BFloat16", "Half", "expected scalar type")


def dispatch_key(device_type: str) -> str:
    """The backend dispatch key of a device type: torch's own mapping (`privateuseone`, or the name
    a vendor plugin renamed it to, is PrivateUse1); a device type torch does not know yet (no
    plugin imported) is PrivateUse1, where out-of-tree backends live."""
    try:
        return torch._C._dispatch_key_for_device(device_type)
    except RuntimeError:
        return "PrivateUse1"


def whole_ops(device_type: str) -> list[str]:
    """The CIA ops the device's backend overrides with its own kernel (for its key or its autograd
    key): the device runs them whole, so the inventory should record them whole."""
    key = dispatch_key(device_type)
    registered = torch._C._dispatch_get_registrations_for_dispatch_key
    cia = set(registered(_CIA))
    return sorted(cia & (set(registered(key)) | set(registered(f"Autograd{key}"))))


def _table(op: str) -> dict[str, tuple[str, str]]:
    """Dispatch key -> (where the serving kernel was registered, what it is: 'kernel', 'default
    backend kernel', 'math kernel', 'autograd kernel', 'backend fallback'), from the dump's lines
    'CUDA: registered at <where> [kernel]'."""
    entries = {}
    for line in torch._C._dispatch_dump_table(op).splitlines():
        key, _, rest = line.partition(": ")
        if rest.endswith("]") and "[" in rest:
            where, _, kind = rest[:-1].rpartition(" [")
            entries[key] = (where, kind)
    return entries


def _out_overload(op: str) -> str | None:
    """The `.out` overload with the same arguments as `op` (or as its functional form, for an
    in-place op): 'aten::mm' -> 'aten::mm.out', 'aten::eq.Tensor' -> 'aten::eq.Tensor_out',
    'aten::add_.Tensor' -> 'aten::add.out'."""
    func = resolve_op(op)
    arguments = [(a.name, str(a.type)) for a in func._schema.arguments]
    ns, _, base = func._schema.name.partition("::")
    packet = getattr(getattr(torch.ops, ns), base.rstrip("_"), None)
    for overload in packet.overloads() if packet is not None else []:
        schema = getattr(packet, overload)._schema
        outs = [a for a in schema.arguments if a.is_out]
        if outs and [(a.name, str(a.type)) for a in schema.arguments if not a.is_out] == arguments:
            return op_name(getattr(packet, overload))
    return None


class Dispatch(NamedTuple):
    status: Status
    detail: str
    fallback: bool = False
    """Served only by the key's boxed backend fallback: what it does (run elsewhere, or raise)
    shows only when it runs, so `status` is 'missing' until a probe call runs through it."""


def dispatch_status(op: str, key: str) -> Dispatch:
    """What the dispatcher would run for `op` under backend `key` (module doc)."""
    table = _table(op)
    (where, backend), (_, autograd) = table.get(key, ("", None)), table.get(f"Autograd{key}", ("", None))
    if backend == "kernel":
        return Dispatch("vendor_kernel", f"{key} kernel")
    if autograd == "kernel":
        return Dispatch("vendor_kernel", f"Autograd{key} kernel overrides the decomposition")
    if "math kernel" in (backend, autograd):
        return Dispatch("decomposes", f"{_CIA}: decomposes into other aten ops")
    if backend == "default backend kernel":
        # torch's generated kernel for a structured op's functional/in-place form computes the
        # output's meta then calls the `.out` overload on the same key
        out = _out_overload(op) if f"Register{_NON_FUNCTIONAL}" in where else None
        if out is None:
            return Dispatch("default_backend", f"default kernel for {key} (composite: calls other ops)")
        if _table(out).get(key, ("", None))[1] == "kernel":
            return Dispatch("default_backend", f"{_NON_FUNCTIONAL} kernel for {key}, through {out}'s {key} kernel")
        return Dispatch("missing", f"its default kernel calls {out}, which has no {key} kernel")
    if backend == "backend fallback":
        return Dispatch("missing", f"{key}'s boxed backend fallback only", fallback=True)
    return Dispatch("missing", f"no {key} kernel")


def _run_once(rec: OpRecord, dtype: str, device: str, max_elements: int) -> tuple[bool, str | None]:
    """(ran, error): whether a seeded call at `dtype` ran on the device, and the error if it raised.
    Not run (False, None) when the example is missing or over the size budget."""
    example = rec.examples[0] if rec.examples else None
    if example is None or example_numel(example) > max_elements:
        return False, None
    try:
        args, kwargs = build_call(rec.op, example, edge=False, dtype_for=lambda _recorded: DTYPES[dtype], device=device)
        resolve_op(rec.op)(*args, **kwargs)
    except (RuntimeError, NotImplementedError, TypeError, ValueError, IndexError) as exc:
        return False, (str(exc).splitlines() or [""])[0] or type(exc).__name__
    return True, None


def probe_device(
    inventory: OpInventory, device_type: str, platform: str, max_elements: int = 1 << 20
) -> CoverageReport:
    """Each inventoried op's dispatch status under the device's key; where the device is usable, one
    seeded call per needed dtype (within a size budget) proves it, or shows a dtype it rejects."""
    key, usable = dispatch_key(device_type), device_type == "cpu" or device_available(device_type)
    out = []
    for rec in inventory.ops:
        status, detail, fallback = dispatch_status(rec.op, key)
        runs = {
            d: _run_once(rec, d, device_type, max_elements)
            for d in rec.dtypes
            if d in DTYPES and usable and (status in ("vendor_kernel", "default_backend") or fallback)
        }
        proven = sorted(d for d, (ran, _) in runs.items() if ran)
        errors = {d: e for d, (_, e) in runs.items() if e}
        if fallback:
            status = "default_backend" if proven else "missing"
            detail += " ran" if proven else " raised" if errors else " (not run: it may run elsewhere or raise)"
        rejected = {d: e for d, e in errors.items() if any(w in e for w in _DTYPE_WORDS)}
        if rejected and status != "missing":
            status = "dtype_unsupported"
            detail = "; ".join(f"{d}: {e[:160]}" for d, e in rejected.items())
        elif errors and not fallback:  # a kernel that raised for the seeded call: shown, not judged here
            detail += "; raised " + "; ".join(f"{d}: {e[:160]}" for d, e in errors.items())
        out.append(
            OpCoverage(
                op=rec.op,
                status=status,
                dtypes_needed=rec.dtypes,
                dtypes_unsupported=sorted(rejected),
                dtypes_proven=proven,
                dtypes_unknown=[d for d in rec.dtypes if d not in proven and d not in rejected],
                source=f"dispatcher: {key}" if status != "missing" else "",
                modules=rec.modules,
                phases=rec.phases,
                detail=detail,
            )
        )
    return CoverageReport(platform=platform, method="probe", ops=out)
