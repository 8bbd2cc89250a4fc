"""Benchmark: release day on the installed service, timed (the drill of tests/e2e/test_release_day.py):
a Hugging Face delivery POSTed to the receiver -> its flow run created -> the run's RayCluster Ready ->
the verdict (flow run Completed), on the test control plane with real processes in every pod.

    .venv/bin/python -m benchmarks.bench_release_day     # brings the control plane up if needed

One code path: the benchmark runs the drill's first test with DAY0_RELEASE_DAY_TIMINGS set and reads
the timings it writes, so what is timed is exactly what the test asserts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["run"]

REPO = Path(__file__).resolve().parents[1]
TEST = "tests/e2e/test_release_day.py::test_a_release_runs_from_the_webhook_to_a_verdict_on_the_installed_service"


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="day0-bench-release-") as tmp:
        out = Path(tmp) / "timings.json"
        env = {**os.environ, "DAY0_RELEASE_DAY_TIMINGS": str(out)}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", TEST], cwd=REPO, env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"the drill failed (rc {done.returncode}):\n{done.stdout[-4000:]}")
        return dict(json.loads(out.read_text()))
