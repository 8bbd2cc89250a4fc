"""Coverage diff: which captured operators the platform's operator library supports.

Two ways to know the library: a declared list in the platform descriptor (here), or probing the
device's dispatcher and kernels (`day0.steps.analyze.probe`).
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

from day0.core.ops import (
    OpInventory,
    declared_key,
    is_composite_implicit,
)
from day0.spec.cluster import OperatorSupport

__all__ = ["CoverageReport", "OpCoverage", "Status", "diff_declared"]

Status = Literal[
    "supported", "composite", "vendor_kernel", "default_backend", "decomposes", "missing", "dtype_unsupported"
]
"""The probe's (`day0.steps.analyze.probe`) are vendor_kernel / default_backend / decomposes; the
declared diff's supported / composite are to be renamed to them."""


class OpCoverage(BaseModel):
    op: str
    status: Status
    dtypes_needed: list[str]
    dtypes_unsupported: list[str] = Field(default=[])
    dtypes_proven: list[str] = Field(default=[], description="Needed dtypes a probe call ran on the device.")
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
        """Ops per status: those present, and always missing and dtype_unsupported."""
        counts = {s: 0 for s in get_args(Status) if s in ("missing", "dtype_unsupported") or self.by_status(s)}
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
