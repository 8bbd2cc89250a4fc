"""Small vendor wheels built in the test and served from a local find-links folder through the real
pip path (PIP_NO_INDEX, PIP_FIND_LINKS), an empty wheel cache and an empty snapshot folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from day0.platforms.libraries import resolve, snapshot
from tests.fixtures.wheels import write_wheel

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
        return write_wheel(served, package, version, members, requires=requires)

    return build
