"""A platform's `operator_library` resolved from the vendors' packages: the registry of readers
(package name -> reader) and the order a package is looked for.

    library = resolve_library(spec.platform.operator_library)     # a ResolvedLibrary

A package is read from the wheel cache, else from its committed snapshot, else downloaded by pip
(not offline); otherwise `WheelUnavailable` naming the spec's field and the command that caches it.
The library is, in order, each later source winning: the composites of the torch the base package
pairs with (its `Requires-Dist: torch==X.*`; the installed torch's version when no base is named), the
base package's registry, the overlays less their vendor's exclusions, then the overrides.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version

from day0.errors import UsageError
from day0.paths import cache_dir
from day0.platforms.libraries import flag_gems, torch_composites, torch_npu
from day0.platforms.libraries.model import LibraryOp, Reading, ResolvedLibrary
from day0.platforms.libraries.snapshot import load_snapshot, snapshot_dir
from day0.platforms.wheels import Wheel, WheelUnavailable, cached_wheel, fetch_wheel
from day0.spec.cluster import VendorLibrary

__all__ = ["BASES", "OVERLAYS", "installed_torch", "read_package", "resolve_library"]

Reader = Callable[[Wheel], Reading]
BASES: dict[str, Reader] = {"torch-npu": torch_npu.read}
"""Vendor plugins whose own registry lists the ops they have kernels for."""
OVERLAYS: dict[str, Reader] = {"flag-gems": flag_gems.read}
"""Kernel packages registered over a backend's kernels."""
_READERS: dict[str, Reader] = {**BASES, **OVERLAYS, "torch": torch_composites.read}

_FIELD = "platform.operator_library"


def read_package(package: str, version: str, *, field: str, offline: bool = False, fresh: bool = False) -> Reading:
    """One package's reading: the cached wheel, else its snapshot, else pip. `fresh` skips the snapshot
    (`day0 fetch-library` reads the wheel itself)."""
    return _read(package, version, field, offline, fresh, str(cache_dir()), str(snapshot_dir()))


@lru_cache(maxsize=16)  # a run resolves a platform's library in several places: read each wheel once
def _read(package: str, version: str, field: str, offline: bool, fresh: bool, _cache: str, _snaps: str) -> Reading:
    reader = _READERS[package]
    wheel = cached_wheel(package, version)
    if wheel is None and not fresh:
        snapshot = load_snapshot(package, version)
        if snapshot is not None:
            return snapshot
    if wheel is None:
        try:
            wheel = fetch_wheel(package, version, offline=offline)
        except WheelUnavailable as exc:
            raise WheelUnavailable(f"{field}: {exc} (no snapshot in {snapshot_dir()} either)") from None
    return reader(wheel)


def installed_torch() -> str:
    try:
        return installed_version("torch").split("+")[0]
    except PackageNotFoundError:
        raise UsageError(
            f"{_FIELD}: no package named and torch is not installed: which torch's composites apply?"
        ) from None


def _known(field: str, name: str, readers: dict[str, Reader]) -> None:
    if name not in readers:
        raise UsageError(f"{field}: unknown package {name!r}; day0 reads {sorted(readers)}")


def resolve_library(spec: VendorLibrary, *, offline: bool = False) -> ResolvedLibrary:
    ops: dict[str, LibraryOp] = {}
    files, notes = [], []
    base: Reading | None = None
    if spec.package is not None:
        _known(f"{_FIELD}.package", spec.package, BASES)
        assert spec.version is not None  # VendorLibrary: a package comes with its version
        base = read_package(spec.package, spec.version, field=f"{_FIELD}.version", offline=offline)
    for i, overlay in enumerate(spec.overlays):
        _known(f"{_FIELD}.overlays[{i}].overlay", overlay.overlay, OVERLAYS)
    torch = base.torch if base is not None and base.torch else installed_torch()
    if base is None:
        notes.append(f"base unread: no vendor package named; the library is torch {torch}'s composites + overlays")
    elif not base.torch:
        notes.append(f"{base.package} {base.version} pins no torch version: the installed torch {torch}'s composites")
    composites = read_package("torch", torch, field=f"{_FIELD} (torch {torch}'s composites)", offline=offline)
    files += composites.files
    for kind in ("decomposes", "default_backend"):
        ops.update(dict.fromkeys(composites.ops[kind], LibraryOp(kind=kind, source=f"torch {torch} composite")))
    if base is not None:
        files += base.files
        ops.update(
            dict.fromkeys(
                base.ops["vendor_kernel"], LibraryOp(kind="vendor_kernel", source=f"{base.package} {base.version}")
            )
        )
    for i, overlay in enumerate(spec.overlays):
        reading = read_package(
            overlay.overlay, overlay.version, field=f"{_FIELD}.overlays[{i}].version", offline=offline
        )
        excluded = reading.ops.get(flag_gems.EXCLUDED + overlay.vendor)
        if excluded is None:
            vendors = sorted(
                g.removeprefix(flag_gems.EXCLUDED) for g in reading.ops if g.startswith(flag_gems.EXCLUDED)
            )
            raise UsageError(
                f"{_FIELD}.overlays[{i}].vendor: {overlay.overlay} {overlay.version} has no backend "
                f"{overlay.vendor!r}; its backends: {vendors}"
            )
        files += [f for f in reading.files if f.file == flag_gems.CONFIG or f"/_{overlay.vendor}/" in f.file]
        source = f"{overlay.overlay} {overlay.version} ({overlay.vendor})"
        kernels = sorted(set(reading.ops["registered"]) - set(excluded))
        ops.update(dict.fromkeys(kernels, LibraryOp(kind="vendor_kernel", source=source)))
    withdrawn = {}
    for o in spec.overrides:
        source = f"override: {o.reason}"
        if o.available:
            kind = ops[o.op].kind if o.op in ops else "vendor_kernel"
            ops[o.op] = LibraryOp(kind=kind, source=source, dtypes=list(o.dtypes) if o.dtypes is not None else None)
        else:
            ops.pop(o.op, None)
            withdrawn[o.op] = source
    decomposing = set(composites.ops["decomposes"])
    whole = sorted(op for op, entry in ops.items() if entry.kind == "vendor_kernel" and op in decomposing)
    return ResolvedLibrary(ops=ops, withdrawn=withdrawn, whole_ops=whole, files=files, notes=notes)
