"""A corrupt regression baseline (issue 44): it failed the whole regression flow with two tracebacks,
no message named the file, and the models after it were skipped. Now it is that model's finding,
naming the file and a way out, and the other models are compared; a corrupt history entry is left
out of the trend with a warning naming it. Real parts: `python -m flows.regression` against the
session's Prefect server, the real file store, step 1 run for each model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from day0.regression import RegressionStore, Snapshot
from day0.store import open_store
from tests.fixtures.paths import REPO

pytestmark = pytest.mark.integration


def test_a_corrupt_baseline_is_named_and_the_other_models_go_on(prefect_server: None, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    spec = {"metadata": {"name": "tiny"}, "model": "tiny-deepseek-v3", "platform": "cpu", "steps": ["analyze"]}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(spec | {"storage": f"file://{tmp_path}/runs"}))
    models = [{"name": name, "spec": "tiny.yaml", "steps": ["analyze"]} for name in ("first", "second")]
    (tmp_path / "watch.yaml").write_text(yaml.safe_dump({"storage": f"file://{tmp_path}/store", "models": models}))
    history = RegressionStore(open_store(f"file://{tmp_path}/store"))
    history.accept(Snapshot.from_results("second", None, None), "baseline created")
    corrupt = tmp_path / "store/regression/baselines/first/v0001.json"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b'{"version": 1, "snapsh')
    history.store.put_text("regression/history/second/00000000T000000000000Z.json", "[]")

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "flows.regression", str(tmp_path / "watch.yaml")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"first: file://{corrupt} is corrupt (not JSON" in proc.stderr, proc.stderr[-3000:]
    assert "--update-baseline" in proc.stderr and "Traceback" not in proc.stderr
    assert len(history.history("second")) == 1, "the second model was rerun and its snapshot stored"
    assert "00000000T000000000000Z.json is corrupt (not a valid Snapshot" in proc.stderr, proc.stderr[-3000:]
    report = (tmp_path / "store/regression/report/second.md").read_text()
    assert "no regression against baseline v1" in report
