"""Coverage diff: which captured operators the platform's operator library has, of what kind, and
at which dtypes that is proven.

Two ways to know the library: read it from the vendor's packages (`day0.platforms.libraries`: the
plugin's registry, torch's composites, overlays, overrides), or probe the device: ask the dispatcher
for a kernel under the device's dispatch key, then run the op once at each dtype the model needs with
seeded small inputs (where the captured shapes fit a size budget), so a kernel that exists but rejects
a dtype (e.g. `_grouped_mm` at fp32 on CPU) is reported as dtype-unsupported.

Dtypes are proven, never guessed: a dtype is in `dtypes_proven` only where a source states it (an
override), or the probe ran the op at it on the device; a registration alone proves the op exists,
not its dtypes (`dtypes_unknown`).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import BaseModel, Field

from day0.core.dtypes import DTYPES
from day0.core.ops import (
    OpInventory,
    OpRecord,
    build_call,
    example_numel,
    is_composite_implicit,
    resolve_op,
)
from day0.platforms.libraries.model import LibraryFile, ResolvedLibrary

__all__ = ["STATUSES", "CoverageReport", "OpCoverage", "Status", "diff_library", "probe_device"]

Status = Literal["vendor_kernel", "default_backend", "decomposes", "missing", "dtype_unsupported"]
STATUSES: tuple[Status, ...] = ("vendor_kernel", "default_backend", "decomposes", "missing", "dtype_unsupported")
_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "meta": "Meta"}


class OpCoverage(BaseModel):
    op: str
    status: Status
    dtypes_needed: list[str]
    dtypes_unsupported: list[str] = Field(default=[])
    dtypes_proven: list[str] = Field(
        default=[], description="Needed dtypes a source states, an override declares, or the probe ran on the device."
    )
    dtypes_unknown: list[str] = Field(default=[], description="Needed dtypes nothing proves (a registration alone).")
    source: str = Field("", description="What put the op in the library, e.g. 'torch-npu 2.14.0'.")
    modules: list[str]
    phases: list[str] = Field(default=[], description="'forward', 'backward', 'optimizer' (the op's record).")
    detail: str = ""


class CoverageReport(BaseModel):
    platform: str
    method: Literal["library", "probe"]
    ops: list[OpCoverage]
    files: list[LibraryFile] = Field(
        default=[], description="Provenance: every package file the library was read from."
    )
    notes: list[str] = Field(default=[])
    whole_ops: list[str] = Field(
        default=[], description="CompositeImplicitAutograd ops the platform has vendor kernels for."
    )

    def by_status(self, status: Status) -> list[OpCoverage]:
        return [o for o in self.ops if o.status == status]

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for o in self.ops:
            counts[o.status] += 1
        return counts

    @property
    def sources(self) -> str:
        """The packages read, as one phrase ('' for a probe)."""
        return ", ".join(dict.fromkeys(f"{f.package} {f.version} ({f.via})" for f in self.files))

    @property
    def dtypes_unknown(self) -> int:
        """Ops whose needed dtypes nothing proves, outside the gaps."""
        return sum(1 for o in self.ops if o.dtypes_unknown and o.status not in ("missing", "dtype_unsupported"))


def _recorded(rec: OpRecord) -> dict[str, Any]:
    """What every coverage row repeats of the op's record."""
    return {"op": rec.op, "dtypes_needed": rec.dtypes, "modules": rec.modules, "phases": rec.phases}


def diff_library(inventory: OpInventory, library: ResolvedLibrary, platform: str) -> CoverageReport:
    """Each captured op against the library, by exact overload (`aten::mm` is the default overload)."""
    out = []
    for rec in inventory.ops:
        common = _recorded(rec)
        entry = library.ops.get(rec.op)
        if entry is None:
            source = library.withdrawn.get(rec.op, "")
            detail = source or f"in none of {library.sources}"
            out.append(OpCoverage(status="missing", source=source, detail=detail, **common))
            continue
        if entry.dtypes is None:
            out.append(OpCoverage(status=entry.kind, source=entry.source, dtypes_unknown=rec.dtypes, **common))
            continue
        stated = set(entry.dtypes)
        bad = [d for d in rec.dtypes if d in DTYPES and d not in stated]
        out.append(
            OpCoverage(
                status="dtype_unsupported" if bad else entry.kind,
                source=entry.source,
                dtypes_unsupported=bad,
                dtypes_proven=[d for d in rec.dtypes if d in stated],
                dtypes_unknown=[d for d in rec.dtypes if d not in DTYPES and d not in stated],
                detail=f"{entry.source} states {sorted(stated)}" if bad else "",
                **common,
            )
        )
    return CoverageReport(
        platform=platform,
        method="library",
        ops=out,
        files=library.files,
        notes=library.notes,
        whole_ops=library.whole_ops,
    )


# --- probing -----------------------------------------------------------------------------------


def _kernel_kind(op: str, key: str) -> Status:
    """The device's own kernel, or a backend-agnostic one every device gets. A NonFunctional
    composite counts only for ops with no per-device kernels (mm has one, but it is not a kernel an
    NPU gets for free: its CPU and CUDA kernels show it needs one per device)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if has(op, key):
        return "vendor_kernel"
    if has(op, "CompositeExplicitAutograd") or (
        has(op, "CompositeExplicitAutogradNonFunctional") and not has(op, "CPU")
    ):
        return "default_backend"
    return "decomposes" if is_composite_implicit(op) else "missing"


def _run_once(rec: OpRecord, dtype: str, device: str, max_elements: int) -> tuple[bool, str | None]:
    """(ran, the kernel's error for that dtype): (False, None) where it could not be sized or failed
    for a reason other than the dtype."""
    example = rec.examples[0] if rec.examples else None
    if example is None or example_numel(example) > max_elements:
        return False, None
    try:
        args, kwargs = build_call(rec.op, example, edge=False, dtype_for=lambda _recorded: DTYPES[dtype], device=device)
        resolve_op(rec.op)(*args, **kwargs)
    except (RuntimeError, NotImplementedError, TypeError, ValueError, IndexError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        dtype_words = ("not implemented for", "dtype", "Float", "BFloat16", "Half", "expected scalar type")
        return False, message if any(w in message for w in dtype_words) else None
    return True, None


def probe_device(
    inventory: OpInventory, device_type: str, platform: str, max_elements: int = 1 << 20
) -> CoverageReport:
    """Dispatcher lookup plus one seeded call per needed dtype on the device, within a size budget:
    the dtypes it ran at are proven."""
    key = _DISPATCH_KEYS.get(device_type, "PrivateUse1")
    runnable = device_type == "cpu" or (
        hasattr(torch, device_type) and getattr(getattr(torch, device_type), "is_available", lambda: False)()
    )
    out = []
    for rec in inventory.ops:
        kind = _kernel_kind(rec.op, key)
        common = _recorded(rec)
        source = f"dispatcher: {key}" if kind == "vendor_kernel" else f"torch {torch.__version__} composite"
        if kind in ("missing", "decomposes"):
            detail = f"no {key} kernel" + ("; decomposes" if kind == "decomposes" else "")
            out.append(
                OpCoverage(
                    status=kind,
                    dtypes_unknown=rec.dtypes,
                    detail=detail,
                    source="" if kind == "missing" else source,
                    **common,
                )
            )
            continue
        ran: list[str] = []
        errors: dict[str, str] = {}
        for d in rec.dtypes:
            if d in DTYPES and runnable:
                done, error = _run_once(rec, d, device_type, max_elements)
                if done:
                    ran.append(d)
                elif error:
                    errors[d] = error
        out.append(
            OpCoverage(
                status="dtype_unsupported" if errors else kind,
                source=source,
                dtypes_unsupported=sorted(errors),
                dtypes_proven=ran,
                dtypes_unknown=[d for d in rec.dtypes if d not in ran and d not in errors],
                detail="; ".join(f"{d}: {e[:160]}" for d, e in errors.items()),
                **common,
            )
        )
    return CoverageReport(platform=platform, method="probe", ops=out)
