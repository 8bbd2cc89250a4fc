"""Error metrics and verdicts: pure maths, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from day0.steps.operators.metrics import compare, default_thresholds, ulp_error, verdict

BF16, FP32 = default_thresholds("bf16"), default_thresholds("fp32")


def test_defaults_are_torch_testing_defaults() -> None:
    assert (FP32.rtol, FP32.atol) == (1.3e-6, 1e-5)
    assert (BF16.rtol, BF16.atol) == (1.6e-2, 1e-5)
    assert (default_thresholds("fp16").rtol, default_thresholds("fp16").atol) == (1e-3, 1e-5)
    assert FP32.min_cosine == 0.99


def test_identical_tensors() -> None:
    x = torch.randn(100, generator=torch.Generator().manual_seed(0))
    m = compare(x, x, FP32, torch.float32)
    assert (m.max_abs, m.max_rel, m.rmse, m.share_beyond_tol, m.nan_inf_mismatch, m.max_ulp) == (0, 0, 0, 0, 0, 0)
    assert m.cosine == pytest.approx(1.0)
    assert verdict(m, FP32)[0]


def test_hand_computed_errors() -> None:
    ref = torch.tensor([1.0, 2.0, -4.0, 0.5], dtype=torch.float64)
    got = torch.tensor([1.0, 2.2, -4.0, 0.5], dtype=torch.float64)
    m = compare(got, ref, FP32)
    assert m.max_abs == pytest.approx(0.2)
    assert m.max_rel == pytest.approx(0.1)
    assert m.mean_rel == pytest.approx(0.025)
    assert m.rmse == pytest.approx(0.1)
    assert m.share_beyond_tol == pytest.approx(0.25)
    cos = float(torch.dot(got, ref) / (got.norm() * ref.norm()))
    assert m.cosine == pytest.approx(cos)


def test_nan_inf_mismatch_counts_one_sided_only() -> None:
    ref = torch.tensor([1.0, math.nan, math.inf, -math.inf, 2.0])
    got = torch.tensor([math.nan, math.nan, math.inf, math.inf, 2.0])
    m = compare(got, ref, FP32)
    assert m.nan_inf_mismatch == 2  # NaN vs 1.0, +inf vs -inf; shared NaN and shared +inf are agreement
    ok, why = verdict(m, FP32)
    assert not ok and "NaN/Inf" in why


def test_ulp_error_of_neighbouring_bf16_values() -> None:
    one = torch.tensor([1.0], dtype=torch.float64)
    next_up = torch.nextafter(torch.tensor([1.0], dtype=torch.bfloat16), torch.tensor([2.0], dtype=torch.bfloat16))
    assert float(ulp_error(next_up.double(), one, torch.bfloat16)) == 1.0
    assert float(ulp_error(torch.tensor([1.0 + 2**-23], dtype=torch.float64), one, torch.float32)) == 1.0


def test_rounding_to_bf16_passes_bf16_but_not_fp32() -> None:
    x = torch.randn(4096, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    rounded = x.to(torch.bfloat16)
    assert verdict(compare(rounded, x, BF16, torch.bfloat16), BF16)[0]
    assert not verdict(compare(rounded, x, FP32, torch.float32), FP32)[0]
    assert compare(rounded, x, BF16, torch.bfloat16).max_ulp <= 0.5 + 1e-9


def test_systematic_scale_error_fails_even_with_high_cosine() -> None:
    x = torch.randn(1000, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    m = compare(x * 1.03, x, BF16)
    assert m.cosine > 0.9999  # a pure scale keeps the direction...
    ok, why = verdict(m, BF16)
    assert not ok and "RMS error" in why  # ...but not the size


def test_direction_error_fails_on_cosine() -> None:
    x = torch.randn(1000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    ok, why = verdict(compare(x.flip(0), x, BF16), BF16)
    assert not ok and "cosine" in why


def test_cancellation_outliers_forgiven_when_rms_small() -> None:
    ref = torch.ones(10_000, dtype=torch.float64)
    ref[:50] = 1e-3  # a few near-zero results of a cancelling sum
    got = ref.clone()
    got[:50] += 1e-4  # 10% off each, but tiny in absolute terms
    m = compare(got, ref, BF16)
    assert m.share_beyond_tol == pytest.approx(0.005)
    assert verdict(m, BF16)[0]
    got2 = ref * (
        1 + 0.02 * torch.sign(torch.randn(10_000, generator=torch.Generator().manual_seed(4), dtype=torch.float64))
    )
    assert not verdict(compare(got2, ref, BF16), BF16)[0]


def test_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="shape mismatch"):
        compare(torch.zeros(2), torch.zeros(3), FP32)
