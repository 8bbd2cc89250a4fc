"""The flag-gems overlay: Triton kernels it registers over a backend's own (`flag_gems/__init__.py`'s
`_FULL_CONFIG`), less what each vendor backend turns off (`runtime/backend/_<vendor>/__init__.py`'s
`CUSTOMIZED_UNUSED_OPS` and `_<vendor>/op_black_list.yaml`, its tested failures).

Read with `ast`, never imported (flag_gems imports triton and torch). An exclusion matches as
flag-gems's own registrar matches it (`runtime/register.py`: the implementing function's name,
`sort_stable` for `sort.stable`), or the exact aten overload it names; flag-gems ignores the unused
list of its `nvidia` backend, and so does this reader. `_FULL_CONFIG`'s version conditions (a third
element, a torch version test) are not evaluated: the entry counts.
"""

from __future__ import annotations

import ast
import re

import yaml

from day0.platforms.libraries.model import Reading, day0_op_name
from day0.platforms.libraries.wheelfiles import file_of
from day0.platforms.wheels import Wheel, WheelError

__all__ = ["CONFIG", "EXCLUDED", "read"]

CONFIG = "flag_gems/__init__.py"
EXCLUDED = "excluded:"  # + vendor: the group of ops that vendor's backend turns off
_BACKEND = re.compile(r"^flag_gems/runtime/backend/_([a-z0-9_]+)/__init__\.py$")


def _assigned(tree: ast.Module, name: str) -> ast.expr | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    return None


def _registrations(source: bytes) -> list[tuple[str, str]]:
    """(`aten` overload name, implementing function) for each `_FULL_CONFIG` entry."""
    value = _assigned(ast.parse(source), "_FULL_CONFIG")
    if not isinstance(value, ast.Tuple | ast.List):
        raise WheelError(f"{CONFIG} has no _FULL_CONFIG tuple")
    out = []
    for entry in value.elts:
        if isinstance(entry, ast.Tuple) and entry.elts and isinstance(entry.elts[0], ast.Constant):
            fn = entry.elts[1] if len(entry.elts) > 1 else None
            out.append((str(entry.elts[0].value), fn.id if isinstance(fn, ast.Name) else ""))
    return out


def _unused(source: bytes) -> set[str]:
    value = _assigned(ast.parse(source), "CUSTOMIZED_UNUSED_OPS")
    if value is None:
        return set()
    return {str(e.value) for e in getattr(value, "elts", []) if isinstance(e, ast.Constant)}


def read(wheel: Wheel) -> Reading:
    config = wheel.read(CONFIG)
    files = [file_of(wheel, CONFIG, config)]
    try:
        registered = _registrations(config)
    except SyntaxError as exc:
        raise WheelError(f"{wheel.package} {wheel.version}: {CONFIG} does not parse ({exc})") from None
    members = set(wheel.members())
    groups = {"registered": sorted({day0_op_name(name) for name, _ in registered})}
    for member in sorted(members):
        found = _BACKEND.match(member)
        if not found:
            continue
        vendor, backend = found.group(1), wheel.read(member)
        files.append(file_of(wheel, member, backend))
        names = _unused(backend) if vendor != "nvidia" else set()  # register.py: not for NVIDIA
        black_list = f"flag_gems/runtime/backend/_{vendor}/op_black_list.yaml"
        if black_list in members:
            raw = wheel.read(black_list)
            files.append(file_of(wheel, black_list, raw))
            listed = (yaml.safe_load(raw) or {}).get("unsupported_operators") or []
            names |= {str(e["name"]) for e in listed if isinstance(e, dict) and "name" in e}
        groups[EXCLUDED + vendor] = sorted({day0_op_name(name) for name, fn in registered if {name, fn} & names})
    return Reading(package=wheel.package, version=wheel.version, files=files, ops=groups)
