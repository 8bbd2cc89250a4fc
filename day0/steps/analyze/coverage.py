"""Coverage diff: which captured operators the platform's operator library has, of what kind, and
at which dtypes that is proven.

Two ways to know the library: read it from the vendor's packages (here, `diff_library` against
`day0.platforms.libraries`: the plugin's registry, torch's composites, overlays, overrides), or probe
the device's dispatcher and kernels (`day0.steps.analyze.probe`).

Dtypes are proven, never guessed: a dtype is in `dtypes_proven` only where a source states it (an
override), or the probe ran the op at it on the device; a registration alone proves the op exists,
not its dtypes (`dtypes_unknown`).
"""

from __future__ import annotations

from typing import Literal, TypedDict

from pydantic import BaseModel, Field

from day0.core.dtypes import DTYPES
from day0.core.ops import (
    OpInventory,
    OpRecord,
)
from day0.platforms.libraries.model import LibraryFile, ResolvedLibrary

__all__ = ["STATUSES", "CoverageReport", "OpCoverage", "Status", "diff_library"]

Status = Literal["vendor_kernel", "default_backend", "decomposes", "missing", "dtype_unsupported"]
STATUSES: tuple[Status, ...] = ("vendor_kernel", "default_backend", "decomposes", "missing", "dtype_unsupported")


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
    def ran_no_kernel(self) -> bool:
        """A probe that ran no op (no device here): it read registrations only, no dtype proven or refuted."""
        return (
            self.method == "probe"
            and any(o.dtypes_needed for o in self.ops)
            and not any(o.dtypes_proven or o.dtypes_unsupported for o in self.ops)
        )

    @property
    def dtypes_unknown(self) -> int:
        """Ops whose needed dtypes nothing proves, outside the gaps."""
        return sum(1 for o in self.ops if o.dtypes_unknown and o.status not in ("missing", "dtype_unsupported"))


class _Recorded(TypedDict):
    op: str
    dtypes_needed: list[str]
    modules: list[str]
    phases: list[str]


def _recorded(rec: OpRecord) -> _Recorded:
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
