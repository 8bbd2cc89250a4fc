"""Small vendor wheels built in the test and served from a local find-links folder through the real
pip path (PIP_NO_INDEX, PIP_FIND_LINKS), an empty wheel cache and an empty snapshot folder."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from day0.platforms.libraries import resolve, snapshot

BuildWheel = Callable[..., Path]


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder pip is served from; the wheel cache and the snapshots start empty."""
    links = tmp_path / "links"
    links.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("DAY0_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(snapshot, "CONFIGS_DIR", tmp_path / "configs")
    resolve._read.cache_clear()
    return links


@pytest.fixture
def build_wheel(served: Path) -> BuildWheel:
    def build(package: str, version: str, members: dict[str, str], requires: list[str] = ()) -> Path:
        dist = f"{package.replace('-', '_')}-{version}"
        path = served / f"{dist}-py3-none-any.whl"
        metadata = f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n"
        metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
        with zipfile.ZipFile(path, "w") as z:
            for member, text in members.items():
                z.writestr(member, text)
            z.writestr(f"{dist}.dist-info/METADATA", metadata)
            z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            z.writestr(f"{dist}.dist-info/RECORD", "")
        return path

    return build
