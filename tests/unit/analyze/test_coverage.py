"""Coverage diff: libraries read from the vendors' packages, and probing the device's dispatcher and kernels."""

from __future__ import annotations

import pytest

from day0.core.ops import OpInventory, OpRecord
from day0.model.build import build_meta_model, load_hf_config
from day0.model.source import resolve_model_source
from day0.model.structure import analyze_structure
from day0.platforms.libraries.model import LibraryOp, ResolvedLibrary
from day0.platforms.libraries.resolve import resolve_library
from day0.spec.pipeline import spec_from_dict
from day0.steps.analyze.coverage import diff_library
from day0.steps.analyze.inventory import capture_operators
from day0.steps.analyze.probe import probe_device


@pytest.fixture(scope="module")
def tiny() -> OpInventory:
    model = build_meta_model(load_hf_config(resolve_model_source("tiny-deepseek-v3")), "tiny", "fp32")
    return capture_operators(model, analyze_structure(model, "tiny").attention_kind, "fp32")


def _ascend_library() -> ResolvedLibrary:
    spec = {"metadata": {"name": "x"}, "model": "tiny-deepseek-v3", "platform": "ascend-910b"}
    platform = spec_from_dict(spec).platform
    assert platform.operator_library != "probe"
    return resolve_library(platform.operator_library)


def test_the_npu_library_has_what_the_hand_list_called_missing(tiny: OpInventory) -> None:
    """torch_npu 2.14.0 registers NPU kernels for histc, sort and AdamW's foreach ops; _grouped_mm and
    _safe_softmax are composites every backend runs: the tiny model lacks nothing, and registration
    proves no dtype."""
    report = diff_library(tiny, _ascend_library(), "ascend-910b")
    status = {o.op: o for o in report.ops}
    assert report.counts["missing"] == 0, report.by_status("missing")
    assert status["aten::histc"].status == "vendor_kernel" and status["aten::histc"].source == "torch-npu 2.14.0"
    assert status["aten::_foreach_lerp_.Scalar"].status == "vendor_kernel"
    assert status["aten::_grouped_mm"].status == "default_backend"
    assert status["aten::_grouped_mm"].source == "torch 2.14.0 composite"
    assert status["aten::_grouped_mm"].modules == ["layers.1 (mla+moe)"]
    assert all(o.dtypes_proven == [] and o.dtypes_unknown == o.dtypes_needed for o in report.ops)
    assert {f.package for f in report.files} == {"torch", "torch-npu"}
    assert sum(report.counts.values()) == len(tiny.ops)


def test_a_stated_dtype_is_proven_and_others_unsupported(tiny: OpInventory) -> None:
    bf16_only = LibraryOp(kind="vendor_kernel", source="override: doc", dtypes=["bf16"])
    library = ResolvedLibrary(ops={"aten::mm": bf16_only})
    report = diff_library(tiny, library, "test")
    mm = next(o for o in report.ops if o.op == "aten::mm")
    assert mm.status == "dtype_unsupported" and mm.dtypes_unsupported == ["fp32"], mm
    assert all(o.status == "missing" for o in report.ops if o.op != "aten::mm")
    stated = ResolvedLibrary(ops={"aten::mm": LibraryOp(kind="vendor_kernel", source="override: doc", dtypes=["fp32"])})
    mm = next(o for o in diff_library(tiny, stated, "test").ops if o.op == "aten::mm")
    assert mm.status == "vendor_kernel" and mm.dtypes_proven == ["fp32"] and mm.dtypes_unknown == [], mm


def test_probe_cpu_supports_the_tiny_model(tiny: OpInventory) -> None:
    report = probe_device(tiny, "cpu", "cpu")
    assert report.counts["missing"] == 0 and report.counts["dtype_unsupported"] == 0, [
        (o.op, o.detail) for o in report.ops if o.status in ("missing", "dtype_unsupported")
    ]
    mm = next(o for o in report.ops if o.op == "aten::mm")
    assert mm.status == "vendor_kernel" and mm.dtypes_proven == ["fp32"]  # it ran on the CPU


def test_probe_finds_a_dtype_the_cpu_kernel_rejects() -> None:
    """The CPU Cholesky kernel exists but rejects float16: the probe runs it and reports the dtype."""
    rec = OpRecord(
        op="aten::linalg_cholesky_ex",
        calls=1,
        phases=["forward"],
        dtypes=["fp16"],
        modules=["m"],
        examples=[[{"shape": [4, 4], "dtype": "fp16"}]],
    )
    inv = OpInventory(compute_dtype="fp16", seq_len=1, layers_captured=[], ops=[rec], constraints=[], capture_seconds=0)
    [cov] = probe_device(inv, "cpu", "cpu").ops
    assert cov.status == "dtype_unsupported" and cov.dtypes_unsupported == ["fp16"], cov


def test_probe_of_a_device_without_kernels_reports_missing(tiny: OpInventory) -> None:
    report = probe_device(tiny, "npu", "bare-npu")  # no vendor plugin loaded: PrivateUse1 has no kernels
    assert report.counts["missing"] > 0
    assert "aten::mm" in {o.op for o in report.by_status("missing")}


def test_optimizer_ops_are_in_the_diff(tiny: OpInventory) -> None:
    """AdamW's foreach ops are in the diff as optimizer ops; withdrawn, they are gaps with the reason."""
    library = ResolvedLibrary(ops={}, withdrawn={"aten::_foreach_lerp_.Scalar": "override: test"})
    missing = {o.op: o for o in diff_library(tiny, library, "bare").by_status("missing")}
    lerp = missing["aten::_foreach_lerp_.Scalar"]
    assert lerp.phases == ["optimizer"] and lerp.modules == ["optimizer: AdamW"] and lerp.dtypes_needed == ["fp32"]
    assert lerp.detail == "override: test"
    assert probe_device(tiny, "cpu", "cpu").counts["missing"] == 0  # the CPU has them all


def test_step_1_names_the_files_its_library_was_read_from() -> None:
    from day0.spec.pipeline import ModelSpec, load_platform
    from day0.steps.analyze.run import analyze_model

    result = analyze_model(ModelSpec(source="tiny-deepseek-v3"), load_platform("ascend-910b"), "fp32")
    files = result.coverage.files
    assert {(f.package, f.version) for f in files} == {("torch-npu", "2.14.0"), ("torch", "2.14.0")}
    markdown = result.to_markdown()
    assert all(f.describe() in markdown and f.file_sha256[:12] in markdown for f in files)
    assert "torch-npu 2.14.0" in result.judge().headline["library"]
    unproven = sum(1 for o in result.coverage.ops if o.dtypes_unknown)
    assert f"{unproven} with dtypes unproven" in result.judge().headline["operators"]
