"""One exit path per step: a task that raises before its work starts (here every step task's
`run_step` replaced by one that raises for step 3) is recorded as failed by the gate, the run exits 1 and the
report and summary name the error; step 1, which it does not need, still passes. A real `day0 run`
process against the session's Prefect server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.paths import REPO

pytestmark = pytest.mark.integration

_RAISE_BEFORE_RUN_STEP = """
import sys
import tasks.steps

real = tasks.steps.run_step

def _raises(spec, *args, **kwargs):
    if spec.name == "parallel":
        raise RuntimeError("raised before run_step")
    return real(spec, *args, **kwargs)

tasks.steps.run_step = _raises
from cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_task_that_raises_before_run_step_fails_the_run(prefect_server: None, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    spec = {
        "metadata": {"name": "raises-early"},
        "model": "tiny-deepseek-v3",
        "platform": "cpu",
        "training": {"seq_len": 64, "global_batch": 4, "micro_batch": 2, "precision": {"compute": "fp32"}},
        "steps": ["analyze", "parallel"],
        "storage": f"file://{tmp_path}/store",
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "PREFECT_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-c", _RAISE_BEFORE_RUN_STEP, "run", str(tmp_path / "spec.yaml"), "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert summary["verdicts"] == {"analyze": "pass", "parallel": "error"}, summary["verdicts"]
    assert summary["failed"] == {"parallel": ["RuntimeError: raised before run_step"]}
    report = Path(summary["report"]["markdown"].removeprefix("file://")).read_text()
    assert "raised before run_step" in report
    assert proc.stderr.strip().splitlines()[-1].startswith("verdict FAIL"), proc.stderr[-500:]
