"""The trial's progress against a real Prefect server, on the tiniest trial spec: the flow run's log
says each run's step, loss, tokens/s and ETA as it trains (issue 42: minutes without a line), the
step's progress artifact ends at 100% naming the candidate's last step, and no library progress bar
is in the log."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from flows.adapt import adapt

pytestmark = pytest.mark.integration

STEPS = 4
LINE = re.compile(rf"^trial: (reference|candidate): step (\d+)/{STEPS}, loss \d+\.\d{{4}}, [\d,]+ tokens/s, ETA \d+")


def _tiniest(storage: str) -> dict:
    return {
        "metadata": {"name": "trial-progress"},
        "model": "tiny-deepseek-v3",
        "platform": "cpu",
        "cluster": "local",
        "training": {"seq_len": 32, "global_batch": 2, "micro_batch": 2, "precision": {"compute": "fp32"}},
        "steps": ["analyze", "parallel", "optimize", "trial"],
        "storage": storage,
        "trial": {
            "scale": {"layers": 2, "hidden": 64, "experts": 4},
            "steps": STEPS,
            "workers": 1,
            "seq_len": 16,
            "micro_batch": 1,
            "checkpoint_every": STEPS,
        },
    }


def _read(flow_run_id: UUID) -> tuple[list[str], list]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)  # logs of a run in this process are sent in the background

    async def read() -> tuple[list[str], list]:
        async with get_client() as client:
            logs = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), sort=LogSort.TIMESTAMP_ASC
            )
            artifacts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["trial-progress-trial-progress"]))
            )
        return [log.message for log in logs], artifacts

    return asyncio.run(read())


@pytest.fixture
def info_logs() -> Iterator[None]:
    """Prefect's run loggers at INFO for the test (the suite runs them at WARNING): progress is said at INFO."""
    prefect_logger = logging.getLogger("prefect")
    level = prefect_logger.level
    prefect_logger.setLevel(logging.INFO)
    yield
    prefect_logger.setLevel(level)


def test_the_trial_says_its_progress_in_the_log_and_as_an_artifact(
    prefect_server: None, info_logs: None, tmp_path: Path
) -> None:
    summary = adapt(spec=_tiniest(f"file://{tmp_path}"))
    assert summary["executed"] == ["analyze", "parallel", "optimize", "trial"], summary
    messages, artifacts = _read(UUID(summary["flow_run_id"]))

    said = [(m[1], int(m[2])) for m in map(LINE.match, messages) if m]
    assert said == [(run, step) for run in ("reference", "candidate") for step in range(1, STEPS + 1)], messages
    assert [m for m in messages if LINE.match(m)][-1].endswith("ETA 0 s")
    assert len(artifacts) == 1 and artifacts[0].type == "progress"
    assert artifacts[0].data == 100.0 and artifacts[0].description.startswith(f"candidate: step {STEPS}/{STEPS}")
    bars = [m for m in messages if "Writing model shards" in m or re.search(r"\d+it/s\]|\|\s*\d+/\d+ \[", m)]
    assert not bars
