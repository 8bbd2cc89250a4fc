"""Coverage diff against declared libraries (probing: test_probe.py)."""

from __future__ import annotations

import pytest

from day0.core.ops import OpInventory
from day0.model.build import build_meta_model, load_hf_config
from day0.model.source import resolve_model_source
from day0.model.structure import analyze_structure
from day0.spec.cluster import OperatorSupport
from day0.spec.pipeline import spec_from_dict
from day0.steps.analyze.coverage import diff_declared
from day0.steps.analyze.inventory import capture_operators


@pytest.fixture(scope="module")
def tiny() -> OpInventory:
    model = build_meta_model(load_hf_config(resolve_model_source("tiny-deepseek-v3")), "tiny", "fp32")
    return capture_operators(model, analyze_structure(model, "tiny").attention_kind, "fp32")


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_declared_npu_library_reports_moe_gaps_with_their_layers(tiny: OpInventory) -> None:
    platform = spec_from_dict(
        {"metadata": {"name": "x"}, "model": "tiny-deepseek-v3", "platform": "ascend-910b"}
    ).platform
    report = diff_declared(tiny, platform.operator_library, platform.name)
    missing = {o.op: o for o in report.by_status("missing")}
    assert "aten::_grouped_mm" in missing and "aten::histc" in missing
    assert missing["aten::_grouped_mm"].modules == ["layers.1 (mla+moe)"]
    assert "aten::mm" not in missing
    assert sum(report.counts.values()) == len(tiny.ops)


def test_declared_dtype_restriction(tiny: OpInventory) -> None:
    library = [OperatorSupport(op="aten::mm", dtypes=["bf16"])]
    report = diff_declared(tiny, library, "test")
    mm = next(o for o in report.ops if o.op == "aten::mm")
    assert mm.status == "dtype_unsupported" and mm.dtypes_unsupported == ["fp32"]


def test_optimizer_ops_are_in_the_diff(tiny: OpInventory) -> None:
    """The NPU library declares no foreach kernels: AdamW's are gaps, named as optimizer ops."""
    platform = spec_from_dict(
        {"metadata": {"name": "x"}, "model": "tiny-deepseek-v3", "platform": "ascend-910b"}
    ).platform
    missing = {o.op: o for o in diff_declared(tiny, platform.operator_library, platform.name).by_status("missing")}
    lerp = missing["aten::_foreach_lerp_.Scalar"]
    assert lerp.phases == ["optimizer"] and lerp.modules == ["optimizer: AdamW"] and lerp.dtypes_needed == ["fp32"]
