"""A vendor wheel is fetched through pip, without dependencies, into the cache, and read without
being installed: served here from a local find-links folder, so the real pip path runs offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from day0.platforms.wheels import WheelError, WheelUnavailable, cached_wheel, fetch_wheel, wheel_dir
from tests.fixtures.wheels import write_wheel


def _wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    entry_points = "[torch.backends]\ndemo = demo:_autoload\n"
    return write_wheel(folder, name, version, files, requires=["torch==2.14.0.*"], entry_points=entry_points)


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    served = tmp_path / "served"
    served.mkdir()
    monkeypatch.setenv("DAY0_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(served))
    return served


def test_fetch_downloads_once_and_reads_without_installing(index: Path) -> None:
    _wheel(index, "demo-vendor", "1.2.0", {"demo/registry.yaml": "supported: [mm]\n"})
    wheel = fetch_wheel("demo-vendor", "1.2.0")
    assert wheel.read("demo/registry.yaml") == b"supported: [mm]\n"
    assert wheel.requires() == ["torch==2.14.0.*"]
    assert wheel.entry_points() == {"torch.backends": {"demo": "demo:_autoload"}}
    assert len(wheel.sha256) == 64
    for served in index.iterdir():  # the index is gone: the second fetch is the cache's
        served.unlink()
    assert fetch_wheel("demo-vendor", "1.2.0").path == wheel.path
    assert cached_wheel("demo_vendor", "1.2.0") is not None  # one name however the user spells it
    with pytest.raises(ModuleNotFoundError):
        __import__("demo")


def test_a_version_not_served_is_refused_with_the_command_that_caches_it(index: Path) -> None:
    _wheel(index, "demo-vendor", "1.2.0", {})
    with pytest.raises(WheelUnavailable, match=r"demo-vendor 9\.9 is neither cached nor served.*fetch-library"):
        fetch_wheel("demo-vendor", "9.9")
    with pytest.raises(WheelUnavailable, match="not in the cache"):
        fetch_wheel("demo-vendor", "1.2.0", offline=True)
    assert not list(wheel_dir("demo-vendor", "9.9").parent.iterdir())  # no half-download left behind


def test_a_member_the_wheel_lacks_is_named(index: Path) -> None:
    _wheel(index, "demo-vendor", "1.2.0", {})
    with pytest.raises(WheelError, match=r"demo-vendor 1\.2\.0.s wheel .* has no demo/registry\.yaml"):
        fetch_wheel("demo-vendor", "1.2.0").read("demo/registry.yaml")
