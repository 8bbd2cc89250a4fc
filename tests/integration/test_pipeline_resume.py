"""The whole pipeline as a user runs it: `day0 run` killed mid-trial, then rerun. The rerun reuses
steps 1-4, and the trial resumes from its last checkpoint instead of starting over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.fixtures.cli import day0, start_day0

pytestmark = pytest.mark.integration


# In `make drill`, not `make test` (about 4 min here): its parts have faster tests, the rerun reusing
# completed steps (test_adapt_flow.py::test_run_writes_results_report_and_resumes), the trial task
# resuming from its last checkpoint (test_trial_run.py::test_task_rerun_resumes_from_s3_checkpoint), a
# run stopped mid-trial leaving no complete-looking step (test_reaper.py), and the whole path on the
# installed service (tests/e2e/test_release_day.py's lost flow-run pod resumed from its checkpoint).
@pytest.mark.drill
def test_killed_run_resumes_from_checkpoint(tmp_path: Path) -> None:
    spec = {
        "metadata": {"name": "resume-check"},
        "model": "tiny-deepseek-v3",
        "platform": "cpu",
        "training": {"seq_len": 64, "global_batch": 4, "micro_batch": 2, "precision": {"compute": "fp32"}},
        "trial": {
            "steps": 30,
            "workers": 1,
            "seq_len": 32,
            "micro_batch": 2,
            "checkpoint_every": 5,
            "scale": {"layers": 2, "hidden": 64, "experts": 4},
        },
        "steps": ["analyze", "parallel", "optimize", "trial"],
        "storage": f"file://{tmp_path}/store",
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {"PREFECT_HOME": str(tmp_path / "prefect")}

    first = start_day0(
        "run", path, "--json", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 600
    # step 15's folder appearing means step 5's or 10's checkpoint is registered: Ray Train reports in
    # order, but its controller registers a report a little after the worker wrote it (a loaded machine
    # was seen killing the run with step 15 written and only step 5 registered); a step's own folder
    # appears while it is still being written, and the kill stops every process of the run at once
    # (cli.reaper), so nothing finishes it afterwards.
    while not list((tmp_path / "store").rglob("trial/checkpoints/candidate/*step_000015*")):
        assert first.poll() is None, f"run ended before the candidate checkpointed:\n{first.stdout.read()}"
        assert time.monotonic() < deadline, "no candidate checkpoint within 10 minutes"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGTERM)
    first.wait(120)
    assert first.returncode != 0
    assert not list((tmp_path / "store").rglob("trial/result.json")), "a killed step must not look complete"

    second = day0("run", path, "--json", env=env, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    summary = json.loads(second.stdout[second.stdout.index("{") :])
    assert summary["executed"] == ["trial"], "steps 1-4 completed in the killed run and are reused"
    result = json.loads(next((tmp_path / "store").rglob("trial/result.json")).read_text())
    candidate = next(r for r in result["runs"] if r["role"] == "candidate")
    assert candidate["resumed_from_step"] >= 5
    assert candidate["steps_executed"] <= 30 - candidate["resumed_from_step"] < 30
    assert result["alignment"]["passed"], result["alignment"]
