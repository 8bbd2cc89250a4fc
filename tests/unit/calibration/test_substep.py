"""Step 3's calibration as a registered sub-step (issue 41, item 2): planned just before step 3 when the
spec asks for it, counted in the scorecard's plan row when it ran (and only then), its failure named there."""

from __future__ import annotations

import datetime as dt

from day0.report.scorecard import rows
from day0.runs.context import StepRecord
from day0.spec.pipeline import spec_from_dict
from day0.steps.registry import needs
from flows.adapt import plan_steps
from tests.fixtures.report import recorded_results

SPEC = {
    "metadata": {"name": "calibrated"},
    "model": "tiny-deepseek-v3",
    "platform": "cpu",
    "storage": "file:///unused",
    "steps": ["parallel"],
}


def test_calibration_is_planned_before_step_3_only_when_the_spec_asks() -> None:
    asks = spec_from_dict(SPEC | {"planner": {"calibrate": True}})
    assert plan_steps(asks) == ["analyze", "calibrate", "parallel"]
    both = spec_from_dict(SPEC | {"steps": ["analyze", "parallel"], "planner": {"calibrate": True}})
    assert plan_steps(both, only=["analyze"]) == ["analyze"]  # no step 3, no calibration
    assert plan_steps(spec_from_dict(SPEC)) == ["analyze", "parallel"]
    assert needs("calibrate") == ()  # the gate reads what it needs as a step's: nothing


def _record(step: str, **fields: object) -> StepRecord:
    return StepRecord(step=step, started_at=dt.datetime(2026, 1, 1), seconds=1.0, **fields)  # type: ignore[arg-type]


def test_the_plan_row_counts_calibration_when_it_ran() -> None:
    results = recorded_results()
    records = {s: _record(s, status="executed", verdict="pass") for s in ("parallel", "optimize")}
    plan = next(r for r in rows(records, results) if r.layer.startswith("plan"))
    assert plan.verdict == results["parallel"].verdict == "pass"  # not calibrated: nothing left unchecked
    records["calibrate"] = _record("calibrate", status="failed", error="CalibrationError: no devices")
    plan = next(r for r in rows(records, results) if r.layer.startswith("plan"))
    assert plan.verdict == "error" and plan.glance[0] == ("failed first", "calibrate: CalibrationError: no devices")
