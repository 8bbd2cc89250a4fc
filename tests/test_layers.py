"""The import rules the architecture rests on, checked on the source (no imports executed):
cli -> flows -> tasks -> day0, never backwards; step packages reach each other only through their
typed results; no import cycles between first-party modules."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAYERS = {"cli": 3, "flows": 2, "tasks": 1, "day0": 0}  # a module may import its own layer or lower ones
STEP_PACKAGES = {"analysis", "numerics", "planner", "trial"}


def _modules() -> dict[str, Path]:
    out = {}
    for top in LAYERS:
        for path in (REPO / top).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(module: str, path: Path, top_level_only: bool = False) -> set[str]:
    """First-party modules imported by `module` (resolved to modules that exist)."""
    tree = ast.parse(path.read_bytes())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in nodes:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(filter(None, [package.rsplit(".", node.level - 1)[0], base]))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        found.update(n for n in names if n in MODULES and n != module)
    return found


def test_layers_point_one_way() -> None:
    wrong = [
        f"{m} imports {i}"
        for m, p in MODULES.items()
        for i in _imports(m, p)
        if LAYERS[i.split(".")[0]] > LAYERS[m.split(".")[0]]
    ]
    assert not wrong, "imports against cli -> flows -> tasks -> day0:\n" + "\n".join(sorted(wrong))


def test_step_packages_meet_only_through_results() -> None:
    def step_of(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if parts[0] == "day0" and len(parts) > 1 and parts[1] in STEP_PACKAGES else None

    wrong = []
    for m, p in MODULES.items():
        own = step_of(m)
        for i in _imports(m, p):
            other = step_of(i)
            if own and other and other != own and i != f"day0.{other}.results":
                wrong.append(f"{m} imports {i}")
    assert not wrong, "a step package imports another's internals (use its results module):\n" + "\n".join(
        sorted(wrong)
    )


def test_core_depends_on_no_step_package() -> None:
    wrong = [
        f"{m} imports {i}"
        for m, p in MODULES.items()
        if m.startswith("day0.core")
        for i in _imports(m, p)
        if i.split(".")[1:2] and i.split(".")[1] in STEP_PACKAGES
    ]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles() -> None:
    graph = {m: _imports(m, p, top_level_only=True) for m, p in MODULES.items()}
    # Tarjan's strongly connected components: any component with more than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_rules_see_a_violation(tmp_path: Path) -> None:
    """The checker itself: a backwards import is found (guards against a walker that sees nothing)."""
    path = tmp_path / "bad.py"
    path.write_text("from flows.adapt import adapt\nimport day0.steps.trial.loop\n")
    assert _imports("day0.steps.operators.bad", path) >= {"flows.adapt", "day0.steps.trial.loop"}
