"""Two `day0 run` at once through real subprocesses (issue 17): a second run of the same spec
refuses with a clear message while the first holds the run (exit 1), and runs of two specs
sharing one store both finish with consistent manifests."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.fixtures.cli import day0, start_day0

pytestmark = pytest.mark.integration  # real Ray clusters / day0 run processes


def _spec(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "metadata": {"name": name},
                "model": "tiny-deepseek-v3",
                "platform": "cpu",
                "steps": ["analyze", "parallel"],
                "storage": f"file://{tmp_path}/store",
            }
        )
    )
    return path


def _start(tmp_path: Path, spec: Path) -> subprocess.Popen[str]:
    home = {"PREFECT_HOME": str(tmp_path / f"prefect-{spec.stem}")}
    return start_day0(
        "run", spec, "--json", env=home, drop=["PREFECT_API_URL"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def test_same_spec_refuses_while_held_and_two_specs_share_a_store(tmp_path: Path) -> None:
    one, two = _spec(tmp_path, "one"), _spec(tmp_path, "two")
    first, other = _start(tmp_path, one), _start(tmp_path, two)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "store").glob("runs/one/*/lock/holder.json")) and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()[1][-3000:]
        time.sleep(0.2)
    second = day0("run", one, timeout=120)
    assert first.poll() is None, "the first run was still holding the spec's run"
    assert second.returncode == 1 and "already running" in second.stderr and "Traceback" not in second.stderr
    for proc, name in ((first, "one"), (other, "two")):
        out, errors = proc.communicate(timeout=600)
        assert proc.returncode == 0, errors[-3000:]
        summary = json.loads(out)
        assert summary["executed"] == ["analyze", "parallel"]
        manifest = json.loads(next((tmp_path / "store" / "runs" / name).rglob("manifest.json")).read_text())
        assert [[r["step"] for r in a] for a in manifest["attempts"]] == [["analyze", "parallel"]]
    assert not list((tmp_path / "store").rglob("holder.json")), "every lock released"
