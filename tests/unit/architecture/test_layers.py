"""The import rules the architecture rests on (the Layout of docs/development/architecture.md states the
same), checked on the source, no imports executed:

1. `benchmarks -> cli -> flows -> tasks -> day0`, never backwards.
2. Inside `day0`, tiers: the foundation (`core` < `errors`, `paths`, `settings`, `yamlio`, `store`,
   `plots`, `provenance`) < the model, the spec and runs (`model` < `spec` < the backend's interface,
   `backends.base`, `backends.jobs` and `backends.local` < `runs`; `spec.base` and each step's
   section of the spec, `steps/<step>/config.py` and its `config_*.py` parts, sit below `spec`) < the
   libraries (`backends`, `platforms`, `planner`, `calibration`, `webhook`) < the steps
   (`steps/<step>/`) < what reads every
   step (`steps.registry`, `report`, `regression`); a module imports its own (sub-)tier or lower ones.
3. `core` is the bottom: it imports nothing else of `day0`.
4. A step reaches another step only through its `result` module; a step's `run` module may also
   import another's `run` (where step 6 takes the model step 5 trains). Outside `day0.steps`, a step
   is reached through its `result`, `run` or `config` module, its `plan` module (steps 3-4's work on a spec
   alone, which `day0 plan` runs without a run), or the registry (which reads each step's `result`,
   `run` and `job`).
5. No import cycles between first-party modules, counting every import (lazy ones inside functions
   and those under `TYPE_CHECKING` too).
6. The product (`cli`, `flows`, `tasks`, `day0`) never imports `testsupport` or `tests`; benchmarks,
   like tests, may use both and a step's parts.

Every first-party module falls under these rules: a package missing from the tiers fails test 2."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.fixtures.paths import REPO

LAYERS = {
    "benchmarks": 4,
    "cli": 3,
    "flows": 2,
    "tasks": 1,
    "day0": 0,
}  # a module may import its own layer or lower ones
# Tiers and, inside the first two, sub-tiers in order: a module imports its own (sub-)tier or lower ones.
TIERS = {
    "core": 0.0,
    **dict.fromkeys(["errors", "paths", "settings", "yamlio", "store", "plots", "provenance"], 0.5),
    "model": 1.0,
    "spec.base": 1.05,  # the base of every model a user writes
    "steps.config": 1.07,  # each step's section of the spec, in its folder
    "spec": 1.1,
    "backends.interface": 1.2,  # what a backend is, its jobs, and the local one: what a run's context carries
    "runs": 1.3,
    **dict.fromkeys(["backends", "platforms", "planner", "calibration", "webhook"], 2.0),
    "steps": 3.0,
    **dict.fromkeys(["steps.registry", "report", "regression"], 4.0),
}
_BACKEND_INTERFACE = ("base", "jobs", "local")
CORE_MAY_IMPORT = {"core"}


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


def _part(module: str) -> str | None:
    """The tier key of a `day0` module: `steps.registry`, `steps` for a step folder, `backends.interface`
    for the backend's interface, else its package."""
    parts = module.split(".")
    if parts[0] != "day0" or len(parts) == 1:
        return None  # `day0` itself (its version) is below everything
    if parts[1:3] == ["steps", "registry"]:
        return "steps.registry"
    if parts[1:3] == ["spec", "base"]:
        return "spec.base"
    if parts[1] == "steps" and (parts[-1] == "config" or parts[-1].startswith("config_")):
        return "steps.config"  # `config_<part>.py`: a part of the section its `config.py` re-exports
    if parts[1] == "backends" and len(parts) > 2 and parts[2] in _BACKEND_INTERFACE:
        return "backends.interface"
    return parts[1]


def _step(module: str) -> tuple[str, str] | None:
    """(step, module inside it) for a module of a step folder, e.g. ("trial", "run")."""
    parts = module.split(".")
    if parts[:2] != ["day0", "steps"] or len(parts) < 3 or parts[2] == "registry":
        return None
    return parts[2], ".".join(parts[3:])


def test_layers_point_one_way() -> None:
    wrong = [
        f"{m} imports {i}"
        for m, p in MODULES.items()
        for i in _imports(m, p)
        if LAYERS[i.split(".")[0]] > LAYERS[m.split(".")[0]]
    ]
    assert not wrong, "imports against cli -> flows -> tasks -> day0:\n" + "\n".join(sorted(wrong))


def test_day0_tiers_point_down() -> None:
    untiered = sorted({p for m in MODULES if (p := _part(m)) and p not in TIERS})
    assert not untiered, f"packages with no tier (add them to TIERS and docs/development/architecture.md): {untiered}"
    wrong = []
    for m, p in MODULES.items():
        if (own := _part(m)) is None:
            continue
        for i in _imports(m, p):
            if (other := _part(i)) is not None and TIERS[other] > TIERS[own]:
                wrong.append(f"{m} (tier {TIERS[own]}) imports {i} (tier {TIERS[other]})")
    assert not wrong, "\n".join(sorted(wrong))


def test_core_is_the_bottom() -> None:
    wrong = [
        f"{m} imports {i}"
        for m, p in MODULES.items()
        if _part(m) == "core"
        for i in _imports(m, p)
        if _part(i) not in CORE_MAY_IMPORT | {None}
    ]
    assert not wrong, "\n".join(wrong)


def test_steps_meet_only_through_results_and_runs() -> None:
    wrong = []
    for m, p in MODULES.items():
        if m.startswith("benchmarks."):
            continue  # a benchmark measures a step's parts, as its tests do
        own = _step(m)
        for i in _imports(m, p):
            if (other := _step(i)) is None or (own and own[0] == other[0]):
                continue
            if m == "day0.steps.registry":
                allowed = {"result", "run", "job"}  # what the registry is made of
            else:
                allowed = (
                    {"result", "run", "plan"} if own is None else {"result", "run"} if own[1] == "run" else {"result"}
                )
            if other[1] not in allowed | {"config"}:  # a step's section of the spec is part of the spec
                wrong.append(f"{m} imports {i}")
    assert not wrong, "a step's internals imported from outside it:\n" + "\n".join(sorted(wrong))


def _test_support_imports(path: Path) -> list[str]:
    """Modules of `testsupport` or `tests` that the file at `path` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_bytes())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        found += [n for n in names if n.split(".")[0] in ("testsupport", "tests")]
    return found


def test_the_product_imports_no_test_support() -> None:
    product = {m: p for m, p in MODULES.items() if not m.startswith("benchmarks.")}
    wrong = [f"{m} imports {n}" for m, p in product.items() for n in _test_support_imports(p)]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles() -> None:
    graph = {m: _imports(m, p) for m, p in MODULES.items()}
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


def test_day0_is_packages_by_concept() -> None:
    """A concept with several modules is a package, not a file-name prefix (`spec_*`, `report_*`): what
    stays loose in `day0/` is the few modules every package shares."""
    loose = sorted(p.stem for p in (REPO / "day0").glob("*.py") if p.stem != "__init__")
    assert len(loose) <= 8, loose
    prefixes = {name.split("_")[0] for name in loose}
    assert len(prefixes) == len(loose), f"modules sharing a prefix want a package: {loose}"


def test_the_rules_see_a_violation(tmp_path: Path) -> None:
    """The checker itself: a backwards import is found (guards against a walker that sees nothing)."""
    path = tmp_path / "bad.py"
    path.write_text("from flows.adapt import adapt\nimport day0.steps.trial.loop\n")
    assert _imports("day0.steps.operators.bad", path) >= {"flows.adapt", "day0.steps.trial.loop"}
    assert _step("day0.steps.trial.loop") == ("trial", "loop") and _part("day0.steps.registry") == "steps.registry"
    support = tmp_path / "support.py"
    support.write_text("from testsupport.chaos import run_with_node_kill\nimport tests.fixtures.webhook\n")
    assert _test_support_imports(support) == ["testsupport.chaos", "tests.fixtures.webhook"]
