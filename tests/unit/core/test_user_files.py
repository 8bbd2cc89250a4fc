"""The user files day0 reads (`day0.yamlio`): only regular files, never more than the size limit,
nesting bounded so no parser or walker runs out of recursion (issue 10)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from day0.errors import SpecError
from day0.settings import LimitsSettings
from day0.yamlio import MAX_DEPTH, read_user_json, read_user_yaml
from tests.fixtures.paths import REPO


def test_a_device_or_fifo_is_refused_before_any_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.yaml")  # nobody writes to it: a read would block forever
    for path in (Path("/dev/zero"), tmp_path / "fifo.yaml"):
        with pytest.raises(SpecError, match="not a regular file"):
            read_user_yaml(path)
        with pytest.raises(ValueError, match="not a regular file"):
            read_user_json(path)


def test_never_more_than_the_limit_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text('{"a": "' + "x" * 2000 + '"}')
    with pytest.raises(ValueError, match=r"big.json is 2009 bytes; the limit is 1024"):
        read_user_json(big, LimitsSettings(max_file_bytes=1024))


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 50_000])
def test_nesting_past_the_bound_is_refused_naming_the_file(tmp_path: Path, depth: int) -> None:
    deep = tmp_path / "config.json"
    deep.write_text('{"a": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(ValueError, match=rf"config.json nests deeper than {MAX_DEPTH}"):
        read_user_json(deep)
    yml = tmp_path / "s.yaml"
    yml.write_text("a: " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(SpecError, match=r"s\.yaml") as exc:
        read_user_yaml(yml)
    assert "nests deeper" in str(exc.value) or "nesting depth" in str(exc.value)


def test_brackets_inside_strings_do_not_count_and_real_configs_read(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"name": "' + "[" * 500 + '\\\\", "b": [[1]], "c": "\\"{"}')
    assert read_user_json(path) == {"name": "[" * 500 + "\\", "b": [[1]], "c": '"{'}
    repo = REPO
    configs = sorted((repo / "configs/models").glob("*/config.json"))
    assert len(configs) > 5, configs  # the committed model configs, read as users' files
    for config in configs:
        assert isinstance(read_user_json(config), dict)
    with pytest.raises(ValueError, match="malformed JSON"):
        (tmp_path / "bad.json").write_text("{")
        read_user_json(tmp_path / "bad.json")
