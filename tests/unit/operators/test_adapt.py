"""Adaptation: missing ops on a platform whose library lacks them get a decomposition, a fallback or a
plugin kernel; wrong ops get replaced; every adaptation is re-checked before it is kept."""

from __future__ import annotations

import pytest

from day0.platforms.kernels import Platform, load_plugin_kernels
from day0.platforms.libraries.model import LibraryOp, ResolvedLibrary
from day0.steps.operators.adapt import adapt_report
from day0.steps.operators.checks import run_operators
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.layers import build_whole_model, compare_layers
from day0.steps.operators.opcheck import check_inventory
from tests.fixtures.numerics import ascend_lacking, entry_point, faulty_platform, tiny_inventory, whole_model

V = ValidationSpec(seeds=2)
SOFTMAX_OPS = ["aten::_safe_softmax", "aten::_softmax_backward_data", "aten::_grouped_mm", "aten::scatter_add"]


def _lacking(*missing: str) -> Platform:
    """A library of every op of the tiny inventory except `missing`, plus the
    elementwise ops a softmax decomposition needs."""
    ops = {r.op for r in tiny_inventory("fp32").ops} - set(missing)
    ops |= {
        "aten::amax",
        "aten::exp",
        "aten::sub.Tensor",
        "aten::div.Tensor",
        "aten::sum.dim_IntList",
        "aten::where.self",
        "aten::logical_not",
        "aten::all.dim",
        "aten::eq.Scalar",
        "aten::isinf",
        "aten::scalar_tensor",
        "aten::full",
        "aten::zeros_like",
        "aten::mul.Tensor",
        # the real (not meta) forward takes transformers' mask shortcuts: a few more ops
        "aten::_local_scalar_dense",
        "aten::all",
        "aten::ones",
        "aten::select.int",
        "aten::tril",
    }
    library = ResolvedLibrary(ops=dict.fromkeys(ops, LibraryOp(kind="vendor_kernel", source="test")))
    return Platform("lacking", library=library)


def test_missing_ops_adapted_then_pass() -> None:
    inv = tiny_inventory("fp32")
    platform = _lacking(*SOFTMAX_OPS)
    report = check_inventory(inv, platform, V, ["bf16"], ops=SOFTMAX_OPS)
    assert {c.op: c.status for c in report.checks} == {op: "missing" for op in SOFTMAX_OPS}
    adapted = adapt_report(report, inv, platform, V)
    assert all(c.ok for c in adapted.checks), adapted.to_markdown()
    how = {a.op: a.strategy for a in adapted.adaptations}
    assert how == {
        "aten::_safe_softmax": "decomposition",
        "aten::_softmax_backward_data": "decomposition",
        "aten::_grouped_mm": "cpu_fallback",
        "aten::scatter_add": "cpu_fallback",
    }
    by = {c.op: c for c in adapted.checks}
    assert "adapt:decomposition" in by["aten::_safe_softmax"].served_by
    assert "stock" in by["aten::_safe_softmax"].served_by  # the decomposition's own ops ran on the platform
    costs = {a.op: a.overhead for a in adapted.adaptations}
    assert costs["aten::_safe_softmax"] > 1 and costs["aten::_grouped_mm"] > costs["aten::_safe_softmax"]
    assert "#### Adaptations" in adapted.to_markdown()


def test_plugin_kernel_preferred_for_missing_op() -> None:
    inv = tiny_inventory("fp32")
    platform = _lacking("aten::_grouped_mm")
    report = check_inventory(inv, platform, V, ["bf16"], ops=["aten::_grouped_mm"])
    plugins = load_plugin_kernels([entry_point("plugin_grouped_mm", "vendor-extra")])
    adapted = adapt_report(report, inv, platform, V, plugins)
    (a,) = adapted.adaptations
    assert a.strategy == "plugin" and adapted.checks[0].ok
    assert adapted.checks[0].served_by == ["plugin:vendor-extra"]


def test_wrong_kernel_replaced_by_decomposition() -> None:
    inv = tiny_inventory("fp32")
    platform = faulty_platform("softmax_without_max")
    report = check_inventory(inv, platform, V, ["bf16"], ops=["aten::_safe_softmax"])
    assert report.checks[0].status == "fail"
    adapted = adapt_report(report, inv, platform, V)
    assert adapted.adaptations[0].strategy == "decomposition" and adapted.checks[0].ok


def test_unfixable_op_reports_every_strategy_tried() -> None:
    inv = tiny_inventory("fp32")
    platform = _lacking("aten::histc")  # no decomposition, no fp32 kernel declared
    report = check_inventory(inv, platform, V, ["bf16"], ops=["aten::histc"])
    assert report.checks[0].status == "missing"  # an integer op absent from the library is missing too
    no_host = adapt_report(report, inv, platform, V, strategies=("plugin", "decomposition", "upcast"))
    (a,) = no_host.adaptations
    assert a.strategy is None and not no_host.checks[0].ok and no_host.failing != []
    assert [t.split(":")[0] for t in a.tried] == ["plugin", "decomposition", "upcast"]
    with_host = adapt_report(report, inv, platform, V)  # the host runs it (at fp32: no int histc there either)
    assert with_host.adaptations[0].strategy == "cpu_fallback" and with_host.checks[0].ok


def test_int_op_missing_on_host_adapted_by_upcast() -> None:
    inv = tiny_inventory("fp32")
    platform = Platform("cpu")
    report = check_inventory(inv, platform, V, ["bf16"], ops=["aten::histc"])
    assert report.checks[0].status == "error"  # "histogram_cpu" not implemented for 'Int'
    adapted = adapt_report(report, inv, platform, V)
    assert adapted.adaptations[0].strategy == "upcast" and adapted.checks[0].ok


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_whole_model_runs_after_adaptation_and_step_result() -> None:
    platform = _lacking("aten::_safe_softmax", "aten::_softmax_backward_data")
    model = build_whole_model(whole_model(layers=2))
    before = compare_layers(model, platform, "fp32", batch=1, seq_len=16)
    assert before.error is not None and "_safe_softmax" in before.error
    result = run_operators(tiny_inventory("fp32"), platform, V, "fp32", whole_model=whole_model())
    assert result.passed, result.to_markdown()
    assert {a.op for a in result.ops.adaptations if a.strategy} >= {
        "aten::_safe_softmax",
        "aten::_softmax_backward_data",
    }
    assert result.layers is not None and result.layers.passed and result.layers.layers == 2
    md = result.to_markdown()
    assert "Step 2" in md and "Whole-model check" in md


def test_vendor_library_platform_is_emulated_when_device_absent() -> None:
    from day0.paths import CONFIGS_DIR
    from day0.spec.cluster import PlatformSpec
    from day0.spec.pipeline import load_yaml

    spec = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "ascend-910b.yaml"))
    platform = Platform.from_spec(spec, plugins=[])
    assert platform.emulated_on == "npu" and platform.device == "cpu"
    assert platform.supports("aten::_grouped_mm", "bf16")  # torch's composite, on any backend
    assert platform.supports("aten::_softmax", "bf16")  # the registry states no dtype: not refused, step 2 runs it
    assert not platform.supports("aten::_scaled_dot_product_efficient_attention", "bf16")  # CUDA's alone


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_emulated_vendor_library_runs_whole_model_after_adaptation() -> None:
    """ascend-910b's library lacking _grouped_mm, histc, sort and tril (which only the real, not meta,
    forward calls): all are adapted, inventory ops up front and tril as the run meets it."""
    spec = ascend_lacking("aten::_grouped_mm", "aten::histc", "aten::sort", "aten::tril")
    result = run_operators(
        tiny_inventory("bf16"), spec, ValidationSpec(), "bf16", whole_model=whole_model(), plugins=[]
    )
    assert result.passed, result.to_markdown()
    fixed = {a.op: a for a in result.ops.adaptations if a.strategy}
    assert {"aten::_grouped_mm", "aten::histc", "aten::sort"} <= fixed.keys()
    runtime = [a for a in result.ops.adaptations if a.problem.startswith("missing in the whole-model run")]
    assert "aten::tril" in {a.op for a in runtime} and all(a.strategy for a in runtime)
    assert any("emulated" in n or "no npu device" in n for n in result.notes)


def test_adapted_in_place_ops_stay_in_place() -> None:
    import torch

    from day0.steps.operators.adapt import make_kernel

    platform = Platform("cpu")
    idx, vals = torch.tensor([0, 2]), torch.tensor([1.5, 2.5], dtype=torch.bfloat16)
    for strategy in ("upcast", "cpu_fallback"):
        entry, _ = make_kernel(strategy, "aten::index_put_", platform, "bf16")
        x = torch.zeros(4, dtype=torch.bfloat16)
        with platform.mode():
            out = entry.fn(x, [idx], vals)
        assert out is x and x.tolist() == [1.5, 0.0, 2.5, 0.0] and x.dtype == torch.bfloat16, strategy


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_a_wrong_kernel_adapted_shows_the_platform_as_shipped_beside_the_adapted() -> None:
    """Issue 42: after step 2 adapted a wrong kernel, its whole-model and training-step checks described
    the adapted platform only ("first divergent: none"), while a run with the vendor's kernels meets the
    wrong one. Both are reported, side by side."""
    platform = faulty_platform("rmsnorm_wrong_eps")
    result = run_operators(tiny_inventory("fp32"), platform, V, "fp32", whole_model=whole_model(layers=2))
    assert any(a.strategy and a.cause == "wrong_numbers" for a in result.ops.adaptations)
    assert result.layers is not None and result.layers.passed, result.to_markdown()
    live = result.layers_live
    assert live is not None and live.first_divergent == "layers.0", result.to_markdown()
    assert result.training_step_live is not None and not result.training_step_live.passed
    assert result.headline["first divergent layer"] == "as shipped layers.0 (forward); adapted none"
    assert any(r.startswith("as shipped (wrong kernels live): whole-model check diverges") for r in result.reasons)
    assert "### As shipped" in result.to_markdown()
