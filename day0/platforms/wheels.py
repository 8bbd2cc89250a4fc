"""A vendor's package as day0 reads it: its wheel, downloaded without dependencies into the cache
and opened as a zip, never installed. Installing would change day0's own process: torch_npu declares
a `torch.backends` entry point that `import torch` autoloads, and it pins its own torch.

`fetch_wheel(package, version)` returns the cached wheel (`$DAY0_CACHE/wheels/<package>/<version>/`),
downloading it with pip first where the cache lacks it; pip's own configuration says which index it
asks. Offline (`offline=True`, or pip failing) and not cached is a `WheelUnavailable` naming the
package, the version and the command that caches it. A member the wheel lacks is a `WheelError`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from functools import cached_property
from pathlib import Path

from day0.errors import UsageError
from day0.paths import cache_dir

__all__ = ["Wheel", "WheelError", "WheelUnavailable", "cached_wheel", "fetch_wheel", "wheel_dir"]

PIP_TIMEOUT_S = 600


class WheelError(UsageError):
    """A wheel that does not hold what day0 reads from it."""


class WheelUnavailable(UsageError):
    """A package version neither cached nor downloadable here."""


def _normalized(package: str) -> str:
    return re.sub(r"[-_.]+", "-", package).lower()


def wheel_dir(package: str, version: str) -> Path:
    return cache_dir() / "wheels" / _normalized(package) / version


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    path: Path

    @cached_property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        with self.path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()

    def members(self) -> list[str]:
        with zipfile.ZipFile(self.path) as z:
            return z.namelist()

    def read(self, member: str) -> bytes:
        with zipfile.ZipFile(self.path) as z:
            try:
                return z.read(member)
            except KeyError:
                raise WheelError(f"{self.package} {self.version}'s wheel ({self.path.name}) has no {member}") from None

    def _dist_info(self, name: str) -> str:
        found = [m for m in self.members() if re.fullmatch(rf"[^/]+\.dist-info/{name}", m)]
        return self.read(found[0]).decode() if found else ""

    def requires(self) -> list[str]:
        """Its `Requires-Dist` lines, e.g. `torch==2.14.0.*`."""
        return Parser().parsestr(self._dist_info("METADATA")).get_all("Requires-Dist") or []

    def entry_points(self) -> dict[str, dict[str, str]]:
        """group -> {name: object reference}, from its entry_points.txt (read, not loaded)."""
        groups: dict[str, dict[str, str]] = {}
        group = None
        for line in self._dist_info("entry_points.txt").splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                group = groups.setdefault(line[1:-1], {})
            elif "=" in line and group is not None:
                name, _, ref = line.partition("=")
                group[name.strip()] = ref.strip()
        return groups


def cached_wheel(package: str, version: str) -> Wheel | None:
    found = sorted(wheel_dir(package, version).glob("*.whl"))
    return Wheel(package, version, found[0]) if found else None


def fetch_wheel(package: str, version: str, *, offline: bool = False) -> Wheel:
    """The wheel of `package==version` for this interpreter, from the cache or downloaded into it."""
    cached = cached_wheel(package, version)
    if cached is not None:
        return cached
    how = f"cache it where an index is reachable: day0 fetch-library {package}=={version}"
    if offline:
        raise WheelUnavailable(f"{package} {version} is not in the cache ({wheel_dir(package, version)}); {how}")
    target = wheel_dir(package, version)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as tmp:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
        ]
        try:
            done = subprocess.run(
                [*command, f"{package}=={version}", "-d", tmp],
                capture_output=True,
                text=True,
                timeout=PIP_TIMEOUT_S,
                env={**os.environ, "PIP_NO_INPUT": "1"},
            )
        except subprocess.TimeoutExpired:
            raise WheelUnavailable(f"{package} {version}: pip download took over {PIP_TIMEOUT_S} s; {how}") from None
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
            reason = lines[-1].strip() if lines else f"pip exited {done.returncode}"
            raise WheelUnavailable(f"{package} {version} is neither cached nor served here ({reason}); {how}")
        staged = Path(tmp) / "wheel"
        staged.mkdir()
        shutil.move(str(wheels[0]), staged / wheels[0].name)
        try:
            os.replace(staged, target)  # atomic publish: a reader sees no half-downloaded wheel
        except OSError:
            if cached_wheel(package, version) is None:  # not a concurrent fetch that won the race
                raise
    wheel = cached_wheel(package, version)
    assert wheel is not None
    return wheel
