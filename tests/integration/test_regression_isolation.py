"""The regression flow never touches a user's run: `make run` of the default spec, then the
regression flow twice over the same spec and store, leaves every file of the user's run
byte-identical. The first regression run records the baseline (a pass, "baseline created"), the
second compares with it and passes; each works in a store folder of its own."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.budgets import small_production_checks
from tests.fixtures.paths import REPO

pytestmark = pytest.mark.integration


def _digests(root: Path) -> dict[str, str]:
    files = (p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_make_run_then_regression_twice_leaves_the_users_run_untouched(prefect_server: None, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "PREFECT_HOME": str(tmp_path / "prefect")}
    store = tmp_path / "store"
    spec = small_production_checks(yaml.safe_load((REPO / "configs/pipelines/tiny-local.yaml").read_text()))
    spec["storage"] = f"file://{store}"
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    watch = {
        "storage": f"file://{store}",
        "models": [{"name": "tiny", "spec": "spec.yaml", "steps": ["analyze", "operators"]}],
    }
    (tmp_path / "watch.yaml").write_text(yaml.safe_dump(watch))

    made = subprocess.run(
        ["make", "-o", ".venv/.installed", "run", f"SPEC={tmp_path / 'spec.yaml'}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-3000:]
    users = store / "runs"
    before = _digests(users)
    assert any(k.endswith("trial/result.json") for k in before) and any(k.endswith("report.html") for k in before)

    def regression() -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "flows.regression", str(tmp_path / "watch.yaml")]
        return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)

    first = regression()
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert "PASS tiny: baseline created: v1" in first.stdout, first.stdout[-2000:]
    second = regression()
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert "PASS tiny: no regression against baseline v1" in second.stdout, second.stdout[-2000:]

    assert _digests(users) == before, "the user's run is byte-identical after two regression runs"
    reruns = sorted((store / "regression/runs/tiny").iterdir())
    assert len(reruns) == 2, reruns
    for rerun in reruns:
        (result,) = rerun.glob("*/*/operators/result.json")
        assert result.stat().st_size > 0
