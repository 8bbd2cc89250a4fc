"""`day0 fetch-library`: cache a vendor package's wheel and write the snapshot of its operator registry.

    day0 fetch-library                      # every library configs/platforms/*.yaml names
    day0 fetch-library torch-npu==2.14.0 flag-gems==5.0.2 [--out DIR]
    day0 fetch-library torch==2.15.0        # the composites alone (a library of overlays on the installed torch)

Downloads each wheel with pip into `$DAY0_CACHE/wheels/` (no dependencies, never installed), reads it
and writes `configs/platforms/libraries/<package>-<version>.json` atomically; a base package brings the
composites of the torch it pins (`torch-<version>.json`). Those snapshots let a machine without the
wheels resolve the same library offline. Exit codes: 0 written; 2 a package day0 cannot read, or a
version neither cached nor served (`WheelUnavailable`), or a wheel without the registry (`WheelError`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli._console import escape, out
from day0.errors import UsageError

__all__ = ["add_fetch_library_command", "cmd_fetch_library", "named_libraries"]


def add_fetch_library_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("fetch-library", help="cache a vendor package and snapshot its operator registry")
    p.add_argument("packages", nargs="*", help="PACKAGE==VERSION (default: every library configs/platforms names)")
    p.add_argument("--out", type=Path, default=None, help="snapshot folder (default configs/platforms/libraries)")
    p.set_defaults(func=cmd_fetch_library)


def named_libraries() -> list[tuple[str, str]]:
    """(package, version) of every base and overlay the platforms in configs/platforms name."""
    from day0.paths import CONFIGS_DIR
    from day0.spec.pipeline import load_platform

    found: dict[tuple[str, str], None] = {}
    for path in sorted((CONFIGS_DIR / "platforms").glob("*.yaml")):
        library = load_platform(str(path)).operator_library
        if library == "probe":
            continue
        if library.package is not None and library.version is not None:
            found[(library.package, library.version)] = None
        for overlay in library.overlays:
            found[(overlay.overlay, overlay.version)] = None
    return list(found)


def _parse(text: str) -> tuple[str, str]:
    package, sep, version = text.partition("==")
    if not sep or not package.strip() or not version.strip():
        raise UsageError(f"fetch-library: expected PACKAGE==VERSION, got {text[:80]!r}")
    return package.strip(), version.strip()


def cmd_fetch_library(args: argparse.Namespace) -> int:
    from day0.platforms.libraries.resolve import BASES, OVERLAYS, read_package
    from day0.platforms.libraries.snapshot import write_snapshot

    wanted = [_parse(p) for p in args.packages] if args.packages else named_libraries()
    known = sorted({*BASES, *OVERLAYS, "torch"})  # torch: the composites a library without a base uses
    for package, _ in wanted:
        if package not in known:
            raise UsageError(f"fetch-library: unknown package {package!r}; day0 reads {known}")
    for package, version in wanted:
        field = f"fetch-library {package}=={version}"
        reading = read_package(package, version, field=field, fresh=True)
        readings = [reading]
        if package in BASES and reading.torch:
            readings.append(read_package("torch", reading.torch, field=f"{field} (torch {reading.torch})", fresh=True))
        for r in readings:
            path = write_snapshot(r, args.out)
            ops = sum(len(v) for v in r.ops.values())
            out().print(f"{escape(r.package)} {escape(r.version)}: {ops} ops -> {escape(str(path))}", highlight=False)
    return 0
