"""Settings read `DAY0_<AREA>_<FIELD>` from the environment, arguments win, and a bad variable is a usage
error that names it (exit 2 from the command line)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from day0.errors import UsageError
from day0.settings import HubSettings, LimitsSettings, StoreSettings
from tests.fixtures.cli import day0
from tests.fixtures.paths import REPO as ROOT


def test_fields_come_from_their_variables_in_any_case(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.upper().startswith(("DAY0_LIMITS_", "DAY0_STORE_", "DAY0_HUB_"))]:
        monkeypatch.delenv(name)  # the session's S3 test server sets DAY0_STORE_* for every test
    assert LimitsSettings().max_file_bytes == 1 << 20 and StoreSettings().endpoint_url is None
    monkeypatch.setenv("DAY0_LIMITS_MAX_FILE_BYTES", "200")
    monkeypatch.setenv("day0_store_endpoint_url", "http://127.0.0.1:9")
    monkeypatch.setenv("DAY0_HUB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("DAY0_HUB_OFFLINE", "true")
    assert LimitsSettings().max_file_bytes == 200 and LimitsSettings().max_yaml_nodes == 100_000
    assert StoreSettings().endpoint_url == "http://127.0.0.1:9"
    assert HubSettings() == HubSettings(cache_dir=tmp_path, offline=True)


def test_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAY0_LIMITS_MAX_FILE_BYTES", "not a number")  # not read: the argument is given
    assert LimitsSettings(max_file_bytes=5).max_file_bytes == 5


def test_a_bad_variable_is_a_usage_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAY0_LIMITS_MAX_YAML_NODES", "0")
    with pytest.raises(UsageError, match=r"^DAY0_LIMITS_MAX_YAML_NODES: Input should be greater than or equal to 1"):
        LimitsSettings()
    monkeypatch.setenv("DAY0_HUB_OFFLINE", "sometimes")
    with pytest.raises(UsageError, match="DAY0_HUB_OFFLINE: Input should be a valid boolean"):
        HubSettings()
    with pytest.raises(Exception, match="max_file_bytes"):  # a bad argument stays pydantic's own error
        LimitsSettings(max_file_bytes=0)
    with pytest.raises(Exception, match="bogus"):
        LimitsSettings(bogus=1)  # type: ignore[call-arg]


def test_the_command_line_exits_2_on_a_bad_variable(tmp_path: Path) -> None:
    tiny = ROOT / "configs" / "pipelines" / "tiny-local.yaml"
    proc = day0("validate", tiny, env={"DAY0_LIMITS_MAX_FILE_BYTES": "lots"}, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "DAY0_LIMITS_MAX_FILE_BYTES: Input should be a valid integer" in proc.stderr


def test_the_cancel_poll_is_read_and_a_bad_one_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """`flows.adapt` reads RunSettings at the flow's start (`check_attempt`), so a bad value stops it there."""
    from day0.settings import RunSettings

    monkeypatch.setenv("DAY0_RUN_CANCEL_POLL_S", "0.5")
    assert RunSettings().cancel_poll_s == 0.5
    monkeypatch.setenv("DAY0_RUN_CANCEL_POLL_S", "0")
    with pytest.raises(UsageError, match=r"^DAY0_RUN_CANCEL_POLL_S: Input should be greater than 0"):
        RunSettings()
