"""The catalogue's kernels as `day0.platforms` plugins, and the CPU platforms made of them.

A fault's kernel is offered under the fault's name, its baseline under `<name>-baseline`, through a
dist-info written under a site directory put on this process's path and on the path of the
processes it starts (spawned ranks, Ray workers), so the library finds them as any vendor plugin.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from importlib.metadata import EntryPoint
from pathlib import Path

from day0.platforms.kernels import ENTRY_POINT_GROUP, Platform
from day0.spec.cluster import PlatformSpec
from testsupport.fault_matrix.catalogue import Fault

__all__ = ["install_plugins", "plugin_platform", "plugin_platform_spec"]


def install_plugins(faults: Iterable[Fault], site: Path, module_dirs: Iterable[Path]) -> list[str]:
    """Write a dist-info under `site` offering each fault's kernels as `day0.platforms` entry points
    (named after the fault; baselines as `<name>-baseline`) and put `site` and `module_dirs` on the
    path of this process and of processes it starts. Returns the path entries added."""
    info = site / "day0_fault_catalogue-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: day0-fault-catalogue\nVersion: 0.1\n")
    lines = ["[day0.platforms]"]
    for f in faults:
        lines += [f"{f.name} = {f.kernel}"] if f.kernel else []
        lines += [f"{f.name}-baseline = {f.baseline_kernel}"] if f.baseline_kernel else []
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    paths = [str(site), *map(str, module_dirs)]
    sys.path[:0] = [p for p in paths if p not in sys.path]
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])
    return paths


def plugin_platform_spec(name: str | None) -> PlatformSpec | None:
    """The CPU platform with plugin `name` as its vendor plugin (None: no platform table)."""
    from day0.paths import CONFIGS_DIR
    from day0.spec.pipeline import load_yaml

    if name is None:
        return None
    spec = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "cpu.yaml"))
    return spec.model_copy(update={"name": f"cpu+{name}", "vendor_plugin": name})


def plugin_platform(plugin: str) -> Platform:
    """The platform step 2 checks: the CPU with the installed plugin `plugin` as its kernels."""
    from importlib.metadata import entry_points

    eps: list[EntryPoint] = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == plugin]
    spec = plugin_platform_spec(plugin)
    if not eps or spec is None:
        raise LookupError(f"plugin {plugin!r} is not installed: call install_plugins first")
    return Platform.from_spec(spec, plugins=eps)
