"""What reading a vendor's package yields, and the operator library a platform resolves to.

A `Reading` is one wheel's registry as data (its op names grouped, every file it came from with the
wheel's and the member's sha256): what a reader returns and what a snapshot stores. A
`ResolvedLibrary` is a platform's whole library: base package + the torch composites it pairs with
+ overlays + overrides, each op with its kind and the source that put it there.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

__all__ = ["Kind", "LibraryFile", "LibraryOp", "Reading", "ResolvedLibrary", "day0_op_name"]

Kind = Literal["vendor_kernel", "default_backend", "decomposes"]

_SCHEMA_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z0-9_]+))?")


def day0_op_name(entry: str, namespace: str = "aten") -> str:
    """A registry's op, as a bare overload name (`add.Tensor`, `as_strided`) or a schema
    (`add.Tensor(Tensor self, ...) -> Tensor`), in day0's notation: `aten::add.Tensor`; a name
    without an overload is the default overload, `aten::as_strided` (`day0.core.ops.op_name`)."""
    found = _SCHEMA_NAME.match(entry)
    if found is None:
        raise ValueError(f"not an operator name or schema: {entry[:80]!r}")
    name, overload = found.groups()
    return f"{namespace}::{name}" + (f".{overload}" if overload and overload != "default" else "")


class LibraryFile(BaseModel):
    """Provenance of one file read out of a package's wheel."""

    package: str
    version: str
    file: str = Field(description="The member path inside the wheel.")
    wheel: str = Field(description="The wheel's file name.")
    wheel_sha256: str
    file_sha256: str
    via: Literal["wheel", "snapshot"] = Field(
        "wheel", description="Read from the cached wheel now, or from the committed snapshot of that reading."
    )

    def describe(self) -> str:
        return f"{self.package} {self.version}: {self.file} ({self.via}, wheel sha256 {self.wheel_sha256[:12]})"


class Reading(BaseModel):
    """One wheel's registry: op names by group (a reader's own groups), sorted."""

    package: str
    version: str
    torch: str | None = Field(None, description="The torch version the package pairs with (its Requires-Dist).")
    files: list[LibraryFile]
    ops: dict[str, list[str]]


class LibraryOp(BaseModel):
    kind: Kind
    source: str = Field(description="What put the op there, e.g. 'torch-npu 2.14.0' or 'override: <reason>'.")
    dtypes: list[str] | None = Field(
        None, description="The dtypes a source states; None: unknown (registries state none)."
    )


class ResolvedLibrary(BaseModel):
    """A platform's operator library, every op with its kind and source, and the files it was read from."""

    ops: dict[str, LibraryOp]
    withdrawn: dict[str, str] = Field(default={}, description="op -> source: ops an override declares unavailable.")
    whole_ops: list[str] = Field(
        default=[], description="CompositeImplicitAutograd ops the platform has a vendor kernel for (not decomposed)."
    )
    files: list[LibraryFile] = Field(default=[])
    notes: list[str] = Field(default=[])

    @property
    def sources(self) -> str:
        """The packages read, as one phrase for reports."""
        seen = dict.fromkeys(f"{f.package} {f.version} ({f.via})" for f in self.files)
        return ", ".join(seen) or "no package read"
