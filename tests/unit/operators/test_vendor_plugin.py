"""A vendor plugin that is installed but fails to import is reported with its module and error, never
replaced by a host emulation of the device."""

from __future__ import annotations

from pathlib import Path

import pytest

from day0.errors import PluginError
from day0.platforms.kernels import Platform
from day0.spec.pipeline import load_platform
from tests.fixtures.paths import REPO


def _broken_plugin(root: Path) -> None:
    """An installed distribution whose `day0.platforms` entry point imports a module that raises."""
    (root / "broken_vendor.py").write_text(
        'raise ImportError("libvendor_runtime.so: cannot open shared object file")\n'
    )
    dist = root / "broken_vendor-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-vendor\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[day0.platforms]\nbroken = broken_vendor:register\n")


def test_a_plugin_that_fails_to_import_is_a_plugin_error_naming_module_and_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _broken_plugin(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = load_platform(str(REPO / "tests" / "data" / "platforms" / "openreg.yaml"))
    spec = spec.model_copy(update={"vendor_plugin": "broken", "device_type": "npu"})
    with pytest.raises(PluginError) as raised:
        Platform.from_spec(spec)
    message = str(raised.value)
    assert "'broken'" in message and "broken_vendor:register" in message
    assert "ImportError: libvendor_runtime.so: cannot open shared object file" in message
    assert raised.value.exit_code == 1
