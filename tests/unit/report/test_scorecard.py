"""An honest scorecard (issue 42, item 4), on the recorded run's real results
(tests/data/report/tiny-local.jsonl): a row is PASS only if its checks ran, what did not run or could
not be proven is said as such, and a failed row (and the report's title) names what failed first."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from day0.core.result import StepResult
from day0.report.scorecard import rows
from day0.report.write import write_report
from day0.runs.context import StepRecord
from day0.steps.analyze.result import AnalyzeResult
from tests.fixtures.report import recorded_results, recorded_run


def _record(step: str, result: StepResult, **change: object) -> StepRecord:
    fields = {"verdict": result.verdict, "reasons": result.reasons, **change}
    return StepRecord(step=step, status="executed", started_at=dt.datetime(2026, 1, 1), seconds=1.0, **fields)


def _row(layer: str, results: dict[str, StepResult], records: dict[str, StepRecord]):
    return next(r for r in rows(records, results) if r.layer.startswith(layer))


def _no_device_probe(analyzed: AnalyzeResult, proven_op: str | None = None) -> AnalyzeResult:
    """Step 1's result as a probe on a host without the device leaves it: every op registered, none run
    (`proven_op`: one op the probe did run, as on a host with the device)."""
    ops = [
        o.model_copy(
            update={
                "status": "vendor_kernel",
                "dtypes_proven": o.dtypes_needed if o.op == proven_op else [],
                "dtypes_unsupported": [],
                "dtypes_unknown": [] if o.op == proven_op else o.dtypes_needed,
            }
        )
        for o in analyzed.coverage.ops
    ]
    coverage = analyzed.coverage.model_copy(update={"method": "probe", "ops": ops, "files": []})
    return analyzed.model_copy(update={"coverage": coverage})


def test_a_row_whose_step_did_not_run_is_not_pass() -> None:
    """The issue's plan-only run: step 1 passed, step 2 never ran; the numerical row said PASS."""
    results = recorded_results()
    analyzed = results["analyze"]
    assert analyzed.verdict == "pass"  # the premise: step 1 alone passes
    plan_only = {s: _record(s, results[s]) for s in ("analyze", "parallel", "optimize")}
    row = _row("numerical", results, plan_only)
    assert row.verdict == "incomplete"
    assert "operators: not run" in row.reasons
    assert row.glance[0] == ("unchecked", "operators: not run")
    everything = {s: _record(s, r) for s, r in results.items()}
    assert _row("numerical", results, everything).verdict != "incomplete"  # both steps ran: judged on them


def test_a_probe_that_ran_no_kernel_is_not_a_pass_of_the_numerical_row() -> None:
    results = recorded_results()
    blind = {**results, "analyze": _no_device_probe(results["analyze"])}
    records = {s: _record(s, r) for s, r in blind.items()}
    records["operators"] = _record("operators", results["operators"], verdict="pass", reasons=[])
    assert records["analyze"].verdict == "pass"  # the premise: both steps' verdicts alone read PASS
    row = _row("numerical", blind, records)
    assert row.verdict == "incomplete"
    assert any(r.startswith("analyze: probe ran no kernel (no device)") for r in row.reasons), row.reasons
    ran_one = {**results, "analyze": _no_device_probe(results["analyze"], results["analyze"].coverage.ops[0].op)}
    assert _row("numerical", ran_one, records).verdict == "pass"  # a probe that ran kernels proves what it ran


def test_a_failed_row_leads_with_what_failed_first(tmp_path: Path) -> None:
    """The issue's run: FAIL beside "ops 87 of 87 checked pass", the failing op only in the folded reasons."""
    results = recorded_results()
    reason = "aten::_log_softmax at bf16: max rel 3.1e-01 beyond rtol"
    records = {s: _record(s, r) for s, r in results.items()}
    records["operators"] = _record("operators", results["operators"], verdict="fail", reasons=[reason, "later"])
    row = _row("numerical", results, records)
    assert row.verdict == "fail"
    assert row.glance[0] == ("failed first", f"operators: {reason}")
    assert "checked pass" in dict(row.glance[1:])["ops"]  # the figures follow it

    ctx, steps, wall_s = recorded_run(tmp_path)
    ctx.record(records["operators"])
    markdown = Path(write_report(ctx, wall_s, steps)["markdown"].removeprefix("file://")).read_text()
    title = markdown.split("## Day-0 scorecard")[0]
    assert f"**failed first**: operators: {reason}" in title, title
