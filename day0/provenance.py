"""Which code computed a result: a digest of a module's own sources and of every first-party module
it imports, so a fixed bug never reuses a stale result.

Why not the day0 version alone: a version is bumped by hand and rarely; the sources change with
every fix. Why walk imports ourselves (`ast`, no execution) rather than `modulefinder`: the finder
follows torch and transformers, which costs seconds; only our own packages matter here.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

__all__ = ["FIRST_PARTY", "code_digest", "module_sources"]

FIRST_PARTY = ("day0", "tasks", "flows")
_ROOT = Path(__file__).resolve().parent.parent


def _path_of(module: str) -> Path | None:
    base = _ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(path: Path, module: str) -> set[str]:
    """First-party modules `path` imports (at top level or inside functions), with their packages."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}".rstrip(".")
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    found: set[str] = set()
    for name in names:
        parts = name.split(".")
        if parts[0] in FIRST_PARTY:
            found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return found


@functools.cache
def module_sources(module: str) -> tuple[Path, ...]:
    """Source files of `module` and of every first-party module reachable from it by imports."""
    seen: dict[str, Path] = {}
    stack = [module]
    while stack:
        name = stack.pop()
        if name in seen or (path := _path_of(name)) is None:
            continue
        seen[name] = path
        stack.extend(_imported(path, name) - seen.keys())
    return tuple(sorted(set(seen.values())))


def code_digest(module: str) -> str:
    """Short sha256 over the sources `module_sources(module)` lists (paths and contents)."""
    h = hashlib.sha256()
    for path in module_sources(module):
        h.update(str(path.relative_to(_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]
