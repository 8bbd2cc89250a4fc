"""Thresholds with a reason: the reference's seed-to-seed spread, estimated from its own curve, sets
the alignment thresholds (the spec's values are the limits), and a failure names where the curves part."""

from __future__ import annotations

import math
import random

import pytest

from day0.steps.trial.alignment import compare_curves, reference_noise, seed_spread
from day0.steps.trial.config import TrialTolerance

TREND = [6.0 * math.exp(-0.03 * t) + 2.0 for t in range(200)]


def _noisy(sigma: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [v * (1 + rng.gauss(0, sigma)) for v in TREND]


def test_spread_estimate_matches_independent_runs() -> None:
    """Two runs with independent batch noise differ by 2 sigma / sqrt(pi) per step on average."""
    a, b = _noisy(0.01, 1), _noisy(0.01, 2)
    measured = sum(abs(x - y) / y for x, y in zip(a, b)) / len(a)
    estimate = seed_spread(a)
    assert estimate is not None
    assert estimate[0] == pytest.approx(measured, rel=0.2) and estimate[0] == pytest.approx(
        2 * 0.01 / math.sqrt(math.pi), rel=0.2
    )
    assert seed_spread(TREND[:5]) is None  # too few residuals to say anything


def test_thresholds_derive_from_the_noise_within_the_limits() -> None:
    ref = _noisy(0.01, 1)
    noise = reference_noise(ref, [1.0 + 0.1 * (t % 2) for t in range(len(ref))], start=20)
    assert noise is not None and noise.grad_norm_spread_rel is not None
    tol = TrialTolerance()
    r = compare_curves(ref, [v * 1.004 for v in ref], tolerance=tol, noise=noise)
    assert r.loss_threshold == pytest.approx(tol.noise_fraction * noise.loss_spread_rel)  # ~0.28%, under 2%
    assert not r.passed and r.parted_at_step == 1 and "the curves part at step 1" in r.failures[-1]
    assert "seed-to-seed spread" in r.failures[0]
    assert compare_curves(ref, [v * 1.004 for v in ref], tolerance=tol).passed  # the 2% limit alone passes it
    assert compare_curves(ref, [v * 1.001 for v in ref], tolerance=tol, noise=noise).passed
    loud = reference_noise(_noisy(0.2, 3))  # a very noisy reference: the spec's limit caps the threshold
    assert loud is not None and compare_curves(ref, ref, tolerance=tol, noise=loud).loss_threshold == tol.loss_mean_rel
    off = TrialTolerance(noise_fraction=None)
    assert compare_curves(ref, ref, tolerance=off, noise=noise).loss_threshold == off.loss_mean_rel


def test_grad_norm_scaled_twice_fails_at_step_one_while_the_loss_aligns() -> None:
    ref, grad = _noisy(0.01, 1), [1.0 + 0.05 * math.sin(t) for t in range(200)]
    noise = reference_noise(ref, grad, start=20)
    r = compare_curves(
        ref,
        ref,
        reference_grad_norm=grad,
        candidate_grad_norm=[2 * g for g in grad],
        tolerance=TrialTolerance(),
        noise=noise,
    )
    assert r.loss_mean_ok and not r.grad_norm_ok and not r.passed
    assert (r.parted_at_step, r.parted_metric) == (1, "grad_norm")
    assert r.grad_norm_median_rel_error == pytest.approx(1.0)
    spike = [*grad[:50], 50.0, *grad[51:]]  # one spiky step: the median does not move
    assert compare_curves(ref, ref, reference_grad_norm=grad, candidate_grad_norm=spike, noise=noise).grad_norm_ok
