"""The product wheel holds the product and nothing else: every module of day0, flows, tasks and cli,
and no test scaffolding (testsupport, tests, benchmarks, day0/testing, nor a module named like one:
chaos, fault_matrix, pod_runner).

The wheel is built from a copy of the checkout (a build writes build/ and *.egg-info where it runs)
with the virtualenv's own build backend (`--no-build-isolation`: no network): `uv build`, which the
Makefile installs there, in about a second; `pip wheel` (~3-4 s) where uv is missing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.paths import REPO

PRODUCT = ("day0", "flows", "tasks", "cli")
NOT_PRODUCT = ("testsupport", "tests", "benchmarks", "day0/testing")
SCAFFOLDING_NAMES = ("chaos", "fault_matrix", "pod_runner")
_NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "__pycache__",
    "*.egg-info",
    "build",
    "dist",
    ".day0",
)


def _build_command(out: Path) -> list[str]:
    """uv beside the interpreter (where the Makefile installs it) or on PATH, else pip; both offline."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    offline = ["--no-build-isolation", "-q"]
    if uv:
        return [uv, "build", "--wheel", "--offline", *offline, "--python", sys.executable, "-o", str(out), "."]
    return [sys.executable, "-m", "pip", "wheel", "--no-deps", *offline, "-w", str(out), "."]


def scaffolding_in(names: list[str]) -> list[str]:
    """The wheel entries that are test scaffolding: under a non-product tree, or a module or package
    named like scaffolding anywhere."""
    return [
        n
        for n in names
        if n.startswith(tuple(f"{top}/" for top in NOT_PRODUCT))
        or any(Path(part).stem in SCAFFOLDING_NAMES for part in n.split("/"))
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """(the copied checkout, the names in the wheel built from it)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=_NOT_COPIED)
    done = subprocess.run(_build_command(tmp / "dist"), cwd=src, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [wheel] = (tmp / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return src, zf.namelist()


def test_wheel_holds_every_product_module(built: tuple[Path, list[str]]) -> None:
    src, names = built
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == set(PRODUCT)
    modules = {p.relative_to(src).as_posix() for top in PRODUCT for p in (src / top).rglob("*.py")}
    assert {"day0/steps/trial/faults.py", "cli/main.py"} <= set(names)  # positive controls, by name
    assert modules <= set(names), sorted(modules - set(names))
    # data the product reads: the serving engines' requirement files (day0.steps.inference.engine_env)
    engines = {p.relative_to(src).as_posix() for p in (src / "day0/steps/inference/engines").glob("*.txt")}
    assert "day0/steps/inference/engines/vllm-cpu.txt" in engines and engines <= set(names), engines - set(names)


def test_wheel_holds_no_test_scaffolding(built: tuple[Path, list[str]]) -> None:
    src, names = built
    # the copy the wheel was built from does hold the scaffolding, so its absence below is the build's doing
    assert (src / "testsupport" / "pod_runner" / "__init__.py").is_file()
    assert (src / "testsupport" / "fault_matrix" / "__init__.py").is_file()
    assert not (src / "day0" / "testing").exists()
    assert scaffolding_in(names) == []


def test_scaffolding_check_sees_scaffolding() -> None:
    """The checker itself, on entries a wheel that took in the scaffolding would have."""
    leaked = [
        "testsupport/__init__.py",
        "testsupport/pod_runner/runner.py",
        "tests/conftest.py",
        "benchmarks/run.py",
        "day0/testing/chaos.py",
        "day0/chaos.py",
        "day0/steps/fault_matrix/__init__.py",
        "cli/pod_runner.py",
    ]
    assert scaffolding_in([*leaked, "day0/steps/trial/faults.py", "cli/main.py"]) == leaked
