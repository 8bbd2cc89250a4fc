"""The pure comparison of a snapshot with its baseline: each layer's regression is flagged with the
numbers, and what stays within tolerance is not."""

from __future__ import annotations

import datetime as dt

import pytest

from day0.regression import RegressionStore, RegressionTolerance, Snapshot, compare_snapshots, run_namespace, trend_rows
from day0.store import open_store

TOL = RegressionTolerance(op_error_ratio=2.0, op_error_floor=1e-6, loss_mean_rel=0.02, throughput_drop=0.3)


def _snap(**kw: object) -> Snapshot:
    base: dict[str, object] = {
        "model": "m",
        "taken_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        "op_errors": {"aten::mm@bf16": 1e-3, "aten::add@bf16": 0.0},
        "op_status": {"aten::mm@bf16": "pass", "aten::add@bf16": "pass"},
        "first_divergent": None,
        "loss": [4.0, 3.0, 2.0, 1.5],
        "tokens_per_s": 1000.0,
    }
    return Snapshot.model_validate(base | kw)


def _regressed(current: Snapshot) -> dict[str, str]:
    return {f.metric: f.change for f in compare_snapshots(_snap(), current, TOL) if f.regressed}


def test_an_unchanged_snapshot_has_no_regression() -> None:
    findings = compare_snapshots(_snap(), _snap(), TOL)
    assert {f.metric for f in findings} == {"aten::mm@bf16", "aten::add@bf16", "loss curve", "trial tokens/s"}
    assert not any(f.regressed for f in findings)


def test_small_noise_is_within_tolerance() -> None:
    noisy = _snap(op_errors={"aten::mm@bf16": 1.9e-3, "aten::add@bf16": 5e-7}, loss=[4.01, 3.0, 2.01, 1.5])
    assert _regressed(noisy.model_copy(update={"tokens_per_s": 800.0})) == {}


def test_a_worse_op_error_is_named_with_its_factor() -> None:
    assert _regressed(_snap(op_errors={"aten::mm@bf16": 5e-3, "aten::add@bf16": 0.0})) == {
        "aten::mm@bf16": "error x5 (0.001 -> 0.005)"
    }


def test_an_op_that_stops_passing_or_disappears_regresses() -> None:
    current = _snap(
        op_errors={"aten::mm@bf16": 1e-3},
        op_status={"aten::mm@bf16": "wrong_numbers"},
        op_problems={"aten::mm@bf16": "RMS error 0.007 > rtol 0.016"},
    )
    assert _regressed(current) == {
        "aten::mm@bf16": "pass -> wrong_numbers: RMS error 0.007 > rtol 0.016",
        "aten::add@bf16": "no longer checked",
    }


def test_a_new_first_divergent_layer_regresses() -> None:
    assert _regressed(_snap(first_divergent="model.layers.1.mlp")) == {
        "first divergent layer": "None -> model.layers.1.mlp"
    }


def test_loss_curve_and_throughput_regressions() -> None:
    regressed = _regressed(_snap(loss=[4.0, 3.3, 2.4, 1.9], tokens_per_s=500.0))
    assert regressed["loss curve"].startswith("mean rel. distance 14.")
    assert regressed["loss curve"].endswith("final loss 1.5000 -> 1.9000")
    assert regressed["trial tokens/s"] == "-50.0% (1000 -> 500 tokens/s, limit -30%)"


def test_a_zero_loss_in_the_baseline_counts_the_absolute_gap_as_the_trial_alignment_does() -> None:
    from day0.core.curves import relative_errors

    base, cur = [0.0, 2.0], [0.5, 2.0]
    finding = next(f for f in compare_snapshots(_snap(loss=base), _snap(loss=cur), TOL) if f.metric == "loss curve")
    assert finding.change.startswith(f"mean rel. distance {sum(relative_errors(base, cur)) / 2:.3%}")
    assert finding.regressed


def test_a_lost_loss_curve_regresses() -> None:
    assert _regressed(_snap(loss=None, tokens_per_s=None)) == {"loss curve": "not produced"}


def test_trend_rows_summarise_each_run() -> None:
    rows = trend_rows([_snap(), _snap(op_status={"aten::mm@bf16": "wrong_numbers", "aten::add@bf16": "pass"})])
    assert [r["wrong_kernels"] for r in rows] == [0, 1]
    assert rows[0]["worst_op"] == "aten::mm@bf16" and rows[0]["final_loss"] == pytest.approx(1.5)


def test_trend_rows_count_adapted_ops_apart_from_wrong_kernels_as_step_2_does() -> None:
    """histc has no bf16 kernel (it raises) and step 2 adapts it by upcast: a warning, not a wrong kernel."""
    adapted = _snap(
        op_status={"aten::mm@bf16": "pass", "aten::histc@bf16": "error", "aten::sort@bf16": "error"},
        adapted={"aten::histc@bf16": "upcast"},
    )
    (row,) = trend_rows([adapted])
    assert row["adapted"] == 1 and row["wrong_kernels"] == 1, "sort raised and nothing fixed it; histc was adapted"
    assert adapted.wrong_kernels() == ["aten::sort@bf16"]


def test_baselines_are_versioned_and_earlier_versions_kept(tmp_path) -> None:
    store = RegressionStore(open_store(f"file://{tmp_path}"))
    assert store.baseline("m") is None
    first = store.accept(_snap(), "baseline created")
    second = store.accept(_snap(tokens_per_s=900.0), "baseline updated")
    assert (first.version, second.version) == (1, 2)
    assert store.baseline("m") == second and [b.version for b in store.baselines("m")] == [1, 2]
    assert store.baselines("m")[0].snapshot.tokens_per_s == 1000.0, "v1 is unchanged"


def test_each_regression_run_gets_its_own_folder_per_model_and_time() -> None:
    when = dt.datetime(2026, 12, 2, 2, 0, 1, 5, tzinfo=dt.UTC)
    assert run_namespace("tiny", when) == "regression/runs/tiny/2026-12-02T020001000005Z"
    assert run_namespace("tiny", when + dt.timedelta(microseconds=1)) != run_namespace("tiny", when)
