"""An attempt stopped mid-step lists what it ran and the step it was in (issue 11: manifest.json had an
empty list after kill -9). Fast: the store objects alone; tests/integration/test_reaper.py kills real runs."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from day0.runs.context import RunContext, StepRecord
from day0.spec.pipeline import spec_from_dict


def _ctx(tmp_path: Path) -> RunContext:
    spec = spec_from_dict(
        {
            "metadata": {"name": "stopped"},
            "model": "tiny-deepseek-v3",
            "platform": "cpu",
            "storage": f"file://{tmp_path}/store",
        }
    )
    ctx = RunContext.create(spec)
    ctx.begin_attempt()
    return ctx


def _done(step: str) -> StepRecord:
    return StepRecord(step=step, status="executed", started_at=dt.datetime.now(dt.UTC), seconds=1.0, verdict="pass")


def _view(tmp_path: Path) -> list[list[tuple[str, str]]]:
    view = json.loads(next((tmp_path / "store").rglob("manifest.json")).read_text())
    return [[(r["step"], r["status"]) for r in attempt] for attempt in view["attempts"]]


def test_a_step_killed_while_running_reads_as_interrupted_in_the_published_view(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    for step in ("analyze", "parallel"):
        ctx.step_started(step, dt.datetime.now(dt.UTC))
        ctx.record(_done(step))
    ctx.step_started("trial", dt.datetime.now(dt.UTC))  # then kill -9: nothing more is written
    assert _view(tmp_path) == [[("analyze", "executed"), ("parallel", "executed"), ("trial", "interrupted")]]
    (trial,) = [r for r in ctx.attempt_records() if r.step == "trial"]
    assert trial.seconds == 0.0 and trial.error and "no result recorded" in trial.error


def test_a_step_that_finished_after_its_marker_is_listed_once_as_it_ended(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    ctx.step_started("analyze", dt.datetime.now(dt.UTC))
    ctx.record(StepRecord(step="analyze", status="interrupted", started_at=dt.datetime.now(dt.UTC), seconds=3.5))
    assert [(r.step, r.status, r.seconds) for r in ctx.attempt_records()] == [("analyze", "interrupted", 3.5)]
    ctx.begin_attempt()  # the rerun: the earlier attempt keeps its record
    ctx.step_started("analyze", dt.datetime.now(dt.UTC))
    ctx.record(_done("analyze"))
    manifest = ctx.load_manifest()
    assert [[(r.step, r.status) for r in a] for a in manifest.attempts] == [
        [("analyze", "interrupted")],
        [("analyze", "executed")],
    ]
