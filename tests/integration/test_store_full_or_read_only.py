"""A full disk and a read-only run folder, real ones (issue 44): `day0 run` in a private mount namespace
(`unshare -rm`) whose store is a 20 KiB tmpfs, or whose run folder is bind-mounted read-only. Each is
reported as the store's state, naming the file it could not write: exit 1, one message, no traceback
(a full disk gave two and "internal error: OSError")."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from day0.runs.context import RunContext
from day0.spec.pipeline import load_spec
from tests.fixtures.paths import REPO

pytestmark = pytest.mark.integration


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=4k none /mnt"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


needs_mounts = pytest.mark.skipif(not _can_mount(), reason="no user and mount namespaces here (unshare -rm)")


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        f"metadata: {{name: full}}\nmodel: tiny-deepseek-v3\nplatform: cpu\nsteps: [analyze]\n"
        f"storage: file://{tmp_path}/store\n"
    )
    (tmp_path / "store").mkdir()
    return path


def _run_in_namespace(mount: str, spec: Path) -> subprocess.CompletedProcess[str]:
    """`day0 run spec` after `mount`, both inside a new user and mount namespace."""
    command = f"{mount} && exec {shlex.quote(sys.executable)} -m cli run {shlex.quote(str(spec))}"
    env = {**os.environ, "COLUMNS": "300", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", command], cwd=REPO, env=env, text=True, capture_output=True, timeout=300
    )


@needs_mounts
def test_a_full_disk_is_reported_as_such(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    proc = _run_in_namespace(f"mount -t tmpfs -o size=20k none {tmp_path}/store", spec)
    assert proc.returncode == 1, proc.stderr[-3000:]
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "the disk is full" in error[0] and str(tmp_path / "store") in error[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and "internal error" not in proc.stderr


@needs_mounts
def test_a_read_only_run_folder_is_reported_as_such(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    folder = tmp_path / "store" / RunContext.create(load_spec(spec)).prefix
    folder.mkdir(parents=True)
    proc = _run_in_namespace(f"mount --bind -o ro {folder} {folder}", spec)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"cannot write {folder}/" in proc.stderr and "read-only" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and "internal error" not in proc.stderr
