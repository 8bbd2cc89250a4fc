"""Coverage diff: which captured operators the platform's operator library supports.

Two ways to know the library: a declared list in the platform descriptor, or probing the device:
ask the dispatcher for a kernel under the device's dispatch key, then run the op once at each dtype
the model needs with seeded small inputs (where the captured shapes fit a size budget), so a kernel
that exists but rejects a dtype (e.g. `_grouped_mm` at fp32 on CPU) is reported as dtype-unsupported.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, Field

from day0.core.dtypes import DTYPES
from day0.core.ops import (
    OpInventory,
    OpRecord,
    build_call,
    declared_key,
    example_numel,
    is_composite_implicit,
    resolve_op,
)
from day0.spec.cluster import OperatorSupport

__all__ = ["CoverageReport", "OpCoverage", "diff_declared", "probe_device"]

Status = Literal["supported", "composite", "missing", "dtype_unsupported"]
_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "meta": "Meta"}


class OpCoverage(BaseModel):
    op: str
    status: Status
    dtypes_needed: list[str]
    dtypes_unsupported: list[str] = Field(default=[])
    modules: list[str]
    phases: list[str] = Field(default=[], description="'forward', 'backward', 'optimizer' (the op's record).")
    detail: str = ""


class CoverageReport(BaseModel):
    platform: str
    method: Literal["declared", "probe"]
    ops: list[OpCoverage]

    def by_status(self, status: Status) -> list[OpCoverage]:
        return [o for o in self.ops if o.status == status]

    @property
    def counts(self) -> dict[str, int]:
        counts = {s: 0 for s in ("supported", "composite", "missing", "dtype_unsupported")}
        for o in self.ops:
            counts[o.status] += 1
        return counts


def diff_declared(inventory: OpInventory, library: list[OperatorSupport], platform: str) -> CoverageReport:
    """Match by exact overload, or by base name when the entry names no overload ('aten::sum')."""
    declared: dict[str, OperatorSupport] = {s.op: s for s in library}
    out = []
    for rec in inventory.ops:
        key = declared_key(rec.op, declared)
        if key is None:
            status: Status = "composite" if is_composite_implicit(rec.op) else "missing"
            out.append(
                OpCoverage(
                    op=rec.op,
                    status=status,
                    dtypes_needed=rec.dtypes,
                    modules=rec.modules,
                    phases=rec.phases,
                    detail="decomposes into other aten ops" if status == "composite" else "",
                )
            )
            continue
        entry = declared[key]
        bad = [d for d in rec.dtypes if entry.dtypes is not None and d not in entry.dtypes]
        out.append(
            OpCoverage(
                op=rec.op,
                status="dtype_unsupported" if bad else "supported",
                dtypes_needed=rec.dtypes,
                dtypes_unsupported=bad,
                modules=rec.modules,
                phases=rec.phases,
                detail=f"library lists {entry.dtypes}" if bad else "",
            )
        )
    return CoverageReport(platform=platform, method="declared", ops=out)


# --- probing -----------------------------------------------------------------------------------


def _has_kernel(op: str, key: str) -> bool:
    """A kernel for the device's key, or a backend-agnostic one every device gets. A NonFunctional
    composite counts only for ops with no per-device kernels (mm has one, but it is not a kernel an
    NPU gets for free: its CPU and CUDA kernels show it needs one per device)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if has(op, key) or has(op, "CompositeExplicitAutograd"):
        return True
    return has(op, "CompositeExplicitAutogradNonFunctional") and not has(op, "CPU")


def _run_once(rec: OpRecord, dtype: str, device: str, max_elements: int) -> str | None:
    """None if the op ran (or could not be sized); else the kernel's error for that dtype."""
    example = rec.examples[0] if rec.examples else None
    if example is None or example_numel(example) > max_elements:
        return None
    try:
        args, kwargs = build_call(rec.op, example, edge=False, dtype_for=lambda _recorded: DTYPES[dtype], device=device)
        resolve_op(rec.op)(*args, **kwargs)
    except (RuntimeError, NotImplementedError, TypeError, ValueError, IndexError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        dtype_words = ("not implemented for", "dtype", "Float", "BFloat16", "Half", "expected scalar type")
        return message if any(w in message for w in dtype_words) else None
    return None


def probe_device(
    inventory: OpInventory, device_type: str, platform: str, max_elements: int = 1 << 20
) -> CoverageReport:
    """Dispatcher lookup plus one seeded call per needed dtype on the device, within a size budget."""
    key = _DISPATCH_KEYS.get(device_type, "PrivateUse1")
    runnable = device_type == "cpu" or (
        hasattr(torch, device_type) and getattr(getattr(torch, device_type), "is_available", lambda: False)()
    )
    out = []
    for rec in inventory.ops:
        if not _has_kernel(rec.op, key):
            status: Status = "composite" if is_composite_implicit(rec.op) else "missing"
            out.append(
                OpCoverage(
                    op=rec.op,
                    status=status,
                    dtypes_needed=rec.dtypes,
                    modules=rec.modules,
                    phases=rec.phases,
                    detail=f"no {key} kernel" + ("; decomposes" if status == "composite" else ""),
                )
            )
            continue
        errors = {
            d: e for d in rec.dtypes if d in DTYPES and runnable and (e := _run_once(rec, d, device_type, max_elements))
        }
        out.append(
            OpCoverage(
                op=rec.op,
                status="dtype_unsupported" if errors else "supported",
                dtypes_needed=rec.dtypes,
                dtypes_unsupported=sorted(errors),
                modules=rec.modules,
                phases=rec.phases,
                detail="; ".join(f"{d}: {e[:160]}" for d, e in errors.items()),
            )
        )
    return CoverageReport(platform=platform, method="probe", ops=out)
