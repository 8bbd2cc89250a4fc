"""Loss alignment maths on synthetic curves (pure functions, no training)."""

from __future__ import annotations

import math

import pytest

from day0.core.curves import relative_errors
from day0.steps.trial.alignment import compare_curves
from day0.steps.trial.config import TrialTolerance

REF = [6.0 * math.exp(-0.02 * t) + 2.0 for t in range(60)]


def test_identical_curves_pass() -> None:
    r = compare_curves(REF, REF)
    assert r.passed and r.loss_mean_rel_error == 0 and r.final_loss_diff == 0 and not r.failures
    assert r.mean_window_start == 21  # public practice: mean error from step 21 on


def test_small_noise_passes_and_offset_fails_with_numbers() -> None:
    noisy = [v * (1 + 0.01 * (-1) ** t) for t, v in enumerate(REF)]
    noisy[0] = REF[0] + 0.001
    assert compare_curves(REF, noisy).passed
    off = [REF[0]] + [v * 1.05 for v in REF[1:]]
    r = compare_curves(REF, off)
    assert not r.passed and r.loss_mean_rel_error == pytest.approx(0.05)
    assert "mean relative loss error from step 21 on is 5.00%, over the 2.00% tolerance" in r.failures[0]


def test_warmup_excluded_from_mean() -> None:
    early = [v * (1.5 if t < 20 else 1.0) for t, v in enumerate(REF)]
    early[0] = REF[0]
    r = compare_curves(REF, early)
    assert r.passed and r.loss_max_abs_diff_step <= 20 and r.loss_max_abs_diff > 1


def test_first_step_abs_or_rel() -> None:
    th = TrialTolerance(first_step_abs=0.005, first_step_rel=0.005)
    within_rel = [REF[0] * 1.004, *REF[1:]]  # abs 0.032 but rel 0.4% < 0.5%: passes
    assert compare_curves(REF, within_rel, tolerance=th).passed
    bad = [REF[0] * 1.01, *REF[1:]]
    r = compare_curves(REF, bad, tolerance=th)
    assert not r.passed and "first-step loss differs" in r.failures[0]


def test_diverged_and_length_mismatch_fail_clearly() -> None:
    r = compare_curves(REF, REF[:30] + [float("nan")] * 30)
    assert not r.passed and "not finite at step 31" in r.failures[0]
    r = compare_curves(REF, REF[:40])
    assert not r.passed and "differ in length" in r.failures[0] and r.steps_compared == 40


def test_short_curve_uses_all_steps_and_grad_norm_error() -> None:
    r = compare_curves(REF[:10], REF[:10], reference_grad_norm=[1.0] * 10, candidate_grad_norm=[1.1] * 10)
    assert r.passed and r.mean_window_start == 1 and r.notes
    assert r.grad_norm_mean_rel_error == pytest.approx(0.1)
    assert relative_errors([2.0, 0.0], [1.0, 0.5]) == [0.5, 0.5]
    with pytest.raises(ValueError):
        compare_curves([], [])
