"""Step 5's verdict on synthetic curves (no training): pass with the numbers, fail naming the failed
check, warn when the two curves are identical, and a diverged curve survives result.json."""

from __future__ import annotations

import json
import math

from day0.steps.trial.alignment import compare_curves
from day0.steps.trial.result import TrainingRunSummary, TrialCurve, TrialResult

REF = [6.0 * math.exp(-0.03 * t) + 2.0 for t in range(40)]


def _curve(label: str, loss: list[float], dtype: str, workers: int) -> TrialCurve:
    return TrialCurve(
        label=label,
        platform="cpu",
        device="cpu",
        compute_dtype=dtype,
        workers=workers,
        steps=list(range(1, len(loss) + 1)),
        loss=loss,
        grad_norm=[1.0] * len(loss),
    )


def _result(candidate: list[float], runs: list[TrainingRunSummary] | None = None) -> TrialResult:
    ref, cand = _curve("reference cpu-fp32 x1", REF, "fp32", 1), _curve("candidate cpu-bf16 x2", candidate, "bf16", 2)
    return TrialResult(
        model="tiny",
        scaled={"layers": 2, "hidden": 64, "experts": 4, "vocab": 512, "parameters": 1},
        dataset="synthetic",
        seq_len=32,
        global_batch=4,
        steps=len(REF),
        reference=ref,
        candidate=cand,
        alignment=compare_curves(REF, candidate),
        runs=runs or [],
        seconds=1.0,
    )


def test_distinct_aligned_curves_pass_with_numbers_and_where_each_ran() -> None:
    result = _result([v * (1 + 0.002 * (-1) ** t) for t, v in enumerate(REF)])
    assert result.verdict == "pass" and result.passed
    assert result.headline["reference"] == "cpu fp32 x1" and result.headline["candidate"] == "cpu bf16 x2 (ddp)"
    assert result.headline["loss mean rel error"] == "0.200% (< 2.00%)" and result.headline["recoveries"] == "0"
    assert result.headline["final loss"] == f"reference {REF[-1]:.4f}, candidate {result.candidate.loss[-1]:.4f}"
    assert any("is 0.200%, within the 2.00% tolerance" in r for r in result.reasons)
    assert any(r.startswith("first-step loss differs by") and "within" in r for r in result.reasons)
    assert result.reasons[-1].startswith(f"final loss: reference {REF[-1]:.4f} (cpu fp32 x1), candidate")
    md = result.to_markdown()
    assert "**PASS**" in md and "| candidate cpu-bf16 x2 | cpu | cpu | bf16 | 2 | ddp |" in md


def test_misaligned_curve_fails_naming_the_check() -> None:
    result = _result([REF[0]] + [v * 1.05 for v in REF[1:]])
    assert result.verdict == "fail" and not result.passed
    assert result.reasons[0].startswith("mean relative loss error from step 21 on is 5.00%, over the 2.00% tolerance")
    assert not any("within the 2.00%" in r for r in result.reasons)  # no passing line for a failed check
    assert "**FAIL**" in result.to_markdown()


def test_identical_curves_warn_and_a_failed_run_fails() -> None:
    same = _result(list(REF))
    assert same.verdict == "warn" and same.passed and "identical at all 40 steps" in same.reasons[0]
    run = TrainingRunSummary(
        role="candidate",
        name="candidate",
        storage_uri="file:///x",
        steps_executed=3,
        resumed_from_step=0,
        attempts=3,
        wall_s=1.0,
        error="TrainingFailedError: boom",
    )
    failed = _result([v * 1.001 for v in REF], runs=[run])
    assert (
        failed.verdict == "fail"
        and "candidate training failed after 3 attempt(s): TrainingFailedError: boom" in failed.reasons
    )


def test_diverged_curve_fails_and_round_trips_through_result_json() -> None:
    result = _result(REF[:5] + [float("nan")] * 35)
    assert result.verdict == "fail" and "candidate loss is not finite at step 6" in result.reasons[0]
    again = TrialResult.model_validate_json(result.model_dump_json())
    assert math.isnan(again.candidate.loss[-1]) and again.verdict == "fail"
    stored = json.loads(json.dumps(result.model_dump(mode="json")))  # the artifact store's path
    assert stored["verdict"] == "fail" and TrialResult.model_validate(stored).reasons == result.reasons


def test_cost_check_labels_datasheet_figures_with_the_calibrated_figures_command() -> None:
    from day0.steps.trial.cost_check import CostCheck

    figures = dict(predicted_step_s=0.025, measured_step_s=0.083, predicted_peak_bytes=2**20, measured_peak_bytes=2**20)
    how = "`day0 calibrate cpu`, then `day0 run SPEC --fresh`"
    datasheet = CostCheck(source="datasheet", calibrate_command=how, **figures)
    assert datasheet.describe()["step time"] == (
        f"predicted 0.025 s, measured 0.083 s (-70%), datasheet, uncalibrated; calibrated: {how}"
    )
    assert "datasheet figures, uncalibrated" in (datasheet.reason() or "") and how in (datasheet.reason() or "")
    calibrated = CostCheck(source="calibrated 2026-01-02", calibrate_command=how, **figures)
    assert calibrated.describe()["step time"].endswith("(-70%), calibrated 2026-01-02") and calibrated.reason() is None
