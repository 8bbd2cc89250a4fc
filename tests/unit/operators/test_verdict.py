"""Step 2's verdict and the shared precision policy: unchecked ops are counted apart, a faulty
kernel fails the step with its numbers, and elementwise ops get no cancellation allowance."""

from __future__ import annotations

import torch

from day0.core.ops import OpRecord
from day0.core.precision import host_compute_dtype, kept_dtype
from day0.platforms.kernels import Platform
from day0.steps.operators.checks import run_operators
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.metrics import ErrorMetrics, verdict
from day0.steps.operators.op_policy import op_thresholds, thresholds_for
from day0.steps.operators.opcheck import check_op
from day0.steps.operators.result import Adaptation, OpCheck, OpCheckReport, OperatorsResult
from tests.fixtures.numerics import faulty_platform, tiny_inventory

V64 = ValidationSpec(reference_dtype="fp64")


def _metrics(cosine: float = 1.0, max_rel: float = 0.004) -> ErrorMetrics:
    return ErrorMetrics(
        numel=8,
        max_abs=0.01,
        max_rel=max_rel,
        mean_rel=0.001,
        cosine=cosine,
        rmse=0.001,
        rel_rmse=0.002,
        share_beyond_tol=0.0,
        nan_inf_mismatch=0,
    )


def _result(*checks: OpCheck, adaptations: list[Adaptation] | None = None) -> OperatorsResult:
    report = OpCheckReport(
        platform="cpu",
        compute_dtypes=["bf16"],
        reference_dtype="fp64",
        seeds=1,
        checks=list(checks),
        adaptations=adaptations or [],
        seconds=1.0,
        ops_per_second=1.0,
    )
    return OperatorsResult(ops=report, notes=["whole-model check skipped: too large"])


def test_unchecked_ops_are_counted_apart_and_warn() -> None:
    r = _result(
        OpCheck(op="aten::mm", dtype="bf16", status="pass", metrics=_metrics(0.9999)),
        OpCheck(op="aten::foo", dtype="bf16", status="skipped", reason="reference failed"),
        OpCheck(op="aten::silu", dtype="bf16", status="pass", metrics=_metrics(), grad_status="skipped"),
    )
    assert r.verdict == "warn" and r.passed
    assert r.headline["ops checked"] == "2" and r.headline["passed"] == "2"
    assert r.headline["not checked"] == "1 ops, 1 gradients"
    assert r.headline["worst at bf16"] == "RMS error 0.002, cosine 0.999900, max rel 0.004 (aten::mm)"
    assert r.headline["ops"] == "2 of 2 checked pass, 0 adapted"
    assert any("aten::foo" in line for line in r.reasons) and any("whole-model" in line for line in r.reasons)
    assert "operators and numerical alignment: WARN" in r.to_markdown()


def test_worst_error_headline_names_the_op_and_metric_and_calls_cancellation() -> None:
    near_zero = _metrics(0.999997, max_rel=5.0)  # RMS error 0.002: the 5 is an element near 0
    r = _result(
        OpCheck(op="aten::mm", dtype="bf16", status="pass", metrics=_metrics(0.9999, max_rel=0.009)),
        OpCheck(op="aten::index_put", dtype="bf16", status="pass", metrics=near_zero),
    )
    assert r.headline["worst at bf16"] == (
        "RMS error 0.002, cosine 0.999900 (aten::mm); max rel 5 (aten::index_put, near-0 reference: cancellation)"
    )


def test_failing_op_fails_with_its_numbers_and_leads_the_table() -> None:
    bad = OpCheck(op="aten::zz", dtype="bf16", status="fail", metrics=_metrics(0.97, 0.5), reason="cosine 0.97 < 0.99")
    r = _result(
        OpCheck(op="aten::aa", dtype="bf16", status="pass", metrics=_metrics()),
        bad,
        adaptations=[Adaptation(op="aten::zz", dtype="bf16", problem="fail", strategy=None)],
    )
    assert r.verdict == "fail" and not r.passed
    assert r.reasons[0].startswith("aten::zz at bf16: fail: max abs 0.01, max rel 0.5, cosine 0.970000")
    assert r.headline["failed"] == "1" and r.headline["adapted"] == "0"
    md = r.to_markdown()
    assert "FAIL" in md.splitlines()[0] and md.index("`aten::zz`") < md.index("`aten::aa`")


def test_a_wrong_kernel_worked_around_is_no_pass_in_the_headline() -> None:
    """Issue 42: FAIL beside "ops 87 of 87 checked pass, 2 adapted"; the headline says what the adaptations hid."""
    fixed = OpCheck(op="aten::zz", dtype="bf16", status="pass", metrics=_metrics(), reason="re-checked")
    wrong = Adaptation(op="aten::zz", dtype="bf16", problem="fail: cosine 0.97", cause="wrong_numbers")
    r = _result(fixed, adaptations=[wrong.model_copy(update={"strategy": "decomposition"})])
    assert r.verdict == "fail"
    assert r.headline["ops"] == "1 of 1 checked pass, 1 adapted (1 wrong kernel(s) worked around)"
    missing = wrong.model_copy(update={"cause": "missing", "strategy": "decomposition"})
    assert _result(fixed, adaptations=[missing]).headline["ops"] == "1 of 1 checked pass, 1 adapted"


def test_faulty_vendor_matmul_fails_step_2() -> None:
    result = run_operators(tiny_inventory("bf16"), faulty_platform("matmul_low_precision"), V64, "bf16", plugins=[])
    assert result.verdict == "fail"
    assert any(line.startswith("aten::mm at bf16: fail") for line in result.reasons)


def test_faulty_optimizer_kernel_fails_step_2() -> None:
    """A `_foreach_lerp_` (AdamW's first moment) that drops its `- w * m` term: an optimizer op,
    checked at the fp32 of the master weights, on the tensors it updates in place."""
    result = run_operators(tiny_inventory("bf16"), faulty_platform("adamw_lerp_drops_term"), V64, "bf16", plugins=[])
    assert result.verdict == "fail"
    named = [line for line in result.reasons if line.startswith("aten::_foreach_lerp_.Scalar at fp32: ")]
    assert named and "wrong numbers" in named[0] and "RMS error" in named[0], result.reasons
    record = tiny_inventory("bf16").by_name()["aten::_foreach_lerp_.Scalar"]
    clean = check_op(record, Platform("cpu"), "bf16", V64, "bf16")
    assert clean.status == "pass" and clean.dtype == "fp32" and clean.metrics is not None
    assert 0 < clean.metrics.max_abs < 1e-5  # the stock kernel's fp32 rounding, compared on the updated tensors


def test_elementwise_outliers_are_not_forgiven_as_cancellation() -> None:
    """A silu that flushes large negative inputs to 0 is off on ~1% of elements by tiny amounts:
    the RMS error stays small, which a reduction's cancellation allowance would forgive."""
    record = OpRecord(
        op="aten::silu", phases=["forward"], dtypes=["bf16"], examples=[[{"shape": [64, 256], "dtype": "bf16"}]]
    )
    platform = Platform("flushing-cpu")
    platform.kernels.register("aten::silu", lambda x: torch.where(x < -6, torch.zeros_like(x), x * torch.sigmoid(x)))
    check = check_op(record, platform, "bf16", V64, "bf16", grads=False)
    assert check.status == "fail" and check.metrics is not None and 0 < check.metrics.share_beyond_tol < 0.05
    assert verdict(check.metrics, thresholds_for("bf16", V64))[0]  # what the allowance would have forgiven
    assert op_thresholds("aten::silu", "bf16", V64).max_share_beyond == 0
    assert op_thresholds("aten::mm", "bf16", V64).max_share_beyond > 0


def test_bf16_check_has_real_errors_within_bf16_tolerance() -> None:
    inventory = tiny_inventory("bf16")
    sums = inventory.by_name()["aten::sum.dim_IntList"]
    assert {"fp32", "bf16"} <= {d["dtype"] for ex in sums.examples for d in ex if isinstance(d, dict) and "shape" in d}
    check = check_op(sums, Platform("cpu"), "bf16", V64, "bf16")
    assert check.status == "pass" and check.metrics is not None and 0 < check.metrics.max_rel < 1.6e-2


def test_fp8_policy_is_one_decision() -> None:
    assert host_compute_dtype("bf16") == ("bf16", None)
    dtype, note = host_compute_dtype("fp8")
    assert dtype == kept_dtype("fp8") == "bf16" and note and "fp8" in note
