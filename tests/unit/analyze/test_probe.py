"""Probing a device: the dispatcher's computed table for its key, then a seeded call per dtype."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from day0.core.ops import OpInventory, OpRecord
from day0.model.build import build_meta_model, load_hf_config
from day0.model.source import resolve_model_source
from day0.model.structure import analyze_structure
from day0.steps.analyze.inventory import capture_operators
from day0.steps.analyze.probe import dispatch_key, dispatch_status, probe_device, whole_ops


@pytest.fixture(scope="module")
def tiny() -> OpInventory:
    model = build_meta_model(load_hf_config(resolve_model_source("tiny-deepseek-v3")), "tiny", "fp32")
    return capture_operators(model, analyze_structure(model, "tiny").attention_kind, "fp32")


@pytest.fixture
def aten_impl() -> Iterator[torch.library.Library]:
    """Registrations into aten for this test only (a vendor plugin's, in miniature)."""
    library = torch.library.Library("aten", "IMPL")
    yield library
    library._destroy()


def _inventory(*records: OpRecord) -> OpInventory:
    return OpInventory(
        compute_dtype="fp32", seq_len=1, layers_captured=[], ops=list(records), constraints=[], capture_seconds=0
    )


def _record(op: str, example: list, dtype: str = "fp32") -> OpRecord:
    return OpRecord(op=op, calls=1, phases=["forward"], dtypes=[dtype], modules=["m"], examples=[example])


def test_device_types_map_to_torch_dispatch_keys() -> None:
    assert [dispatch_key(d) for d in ("cpu", "cuda", "privateuseone")] == ["CPU", "CUDA", "PrivateUse1"]
    assert dispatch_key("npu") == "PrivateUse1"  # no vendor plugin here: torch does not know the name yet


def test_cuda_table_of_the_installed_torch() -> None:
    """Read from the torch build in hand: no GPU needed."""
    status = {op: dispatch_status(op, "CUDA")[0] for op in ("aten::mm", "aten::_grouped_mm", "aten::_safe_softmax")}
    assert status == {
        "aten::mm": "vendor_kernel",
        "aten::_grouped_mm": "vendor_kernel",
        "aten::_safe_softmax": "default_backend",
    }
    assert dispatch_status("aten::softmax.int", "CUDA")[0] == "decomposes"
    # CIA with a CUDA kernel of its own: CUDA runs it whole, a backend without one decomposes it
    assert dispatch_status("aten::silu_backward", "CUDA")[0] == "vendor_kernel"
    assert dispatch_status("aten::silu_backward", "PrivateUse1")[0] == "decomposes"
    assert "aten::silu_backward" in whole_ops("cuda") and "aten::softmax.int" not in whole_ops("cuda")


def test_a_structured_default_kernel_needs_the_out_kernel(aten_impl: torch.library.Library) -> None:
    """`add.Tensor`'s NonFunctional default kernel calls `add.out` on the same key: with no
    PrivateUse1 kernel for it the op is missing; once a backend registers one, it is served."""
    status, detail, _ = dispatch_status("aten::add.Tensor", "PrivateUse1")
    assert status == "missing" and "aten::add.out" in detail
    assert dispatch_status("aten::add_.Tensor", "PrivateUse1")[0] == "missing"  # in place: add.out too
    assert dispatch_status("aten::eq.Tensor", "PrivateUse1")[1].endswith(
        "aten::eq.Tensor_out, which has no PrivateUse1 kernel"
    )
    aten_impl.impl("add.out", lambda self, other, alpha=1, out=None: out, "PrivateUse1")
    assert dispatch_status("aten::add.Tensor", "PrivateUse1")[0] == "default_backend"
    assert dispatch_status("aten::add_.Tensor", "PrivateUse1")[0] == "default_backend"


def test_privateuse1_kernels_registered_by_a_plugin(aten_impl: torch.library.Library) -> None:
    assert dispatch_status("aten::mm", "PrivateUse1")[0] == "missing"
    assert "aten::softmax.int" not in whole_ops("npu")
    aten_impl.impl("mm", lambda a, b: a, "PrivateUse1")
    aten_impl.impl("softmax.int", lambda x, dim, dtype=None: x, "AutogradPrivateUse1")  # a CIA override
    assert dispatch_status("aten::mm", "PrivateUse1")[0] == "vendor_kernel"
    assert dispatch_status("aten::softmax.int", "PrivateUse1")[0] == "vendor_kernel"
    assert "aten::softmax.int" in whole_ops("npu")
    report = probe_device(_inventory(_record("aten::mm", [{"shape": [2, 2], "dtype": "fp32"}] * 2)), "npu", "npu")
    [mm] = report.ops
    assert mm.status == "vendor_kernel" and mm.dtypes_proven == []  # no device here: nothing run


def test_a_backend_fallback_that_was_not_run_is_missing() -> None:
    library = torch.library.Library("_", "IMPL")
    try:
        library.fallback(lambda op, *args, **kwargs: op(*args, **kwargs), "PrivateUse1")
        status, detail, fallback = dispatch_status("aten::histc", "PrivateUse1")
        [cov] = probe_device(_inventory(_record("aten::histc", [{"shape": [8], "dtype": "fp32"}])), "npu", "npu").ops
    finally:
        library._destroy()
    assert status == "missing" and fallback and "backend fallback" in detail
    assert cov.status == "missing" and "not run" in cov.detail
    assert dispatch_status("aten::histc", "PrivateUse1")[1] == "no PrivateUse1 kernel"  # unregistered again


def test_probe_cpu_runs_the_tiny_model(tiny: OpInventory) -> None:
    report = probe_device(tiny, "cpu", "cpu")
    assert report.counts["missing"] == 0 and report.counts["dtype_unsupported"] == 0, [
        (o.op, o.detail) for o in report.ops if o.status in ("missing", "dtype_unsupported")
    ]
    ops = {o.op: o for o in report.ops}
    assert ops["aten::mm"].status == "vendor_kernel" and ops["aten::mm"].dtypes_proven == ["fp32"]
    assert ops["aten::_foreach_lerp_.Scalar"].status == "default_backend"  # the CPU's is the generic loop
    assert report.counts["vendor_kernel"] + report.counts["default_backend"] == len(tiny.ops)


def test_probe_finds_a_dtype_the_cpu_kernel_rejects() -> None:
    """The CPU Cholesky kernel exists but rejects float16: the probe runs it and reports the dtype."""
    [cov] = probe_device(
        _inventory(_record("aten::linalg_cholesky_ex", [{"shape": [4, 4], "dtype": "fp16"}], "fp16")), "cpu", "cpu"
    ).ops
    assert cov.status == "dtype_unsupported" and cov.dtypes_unsupported == ["fp16"] and cov.dtypes_proven == [], cov


def test_probe_of_a_device_without_kernels_reports_missing(tiny: OpInventory) -> None:
    report = probe_device(tiny, "npu", "bare-npu")  # no vendor plugin loaded: PrivateUse1 has no kernels
    missing = {o.op: o.detail for o in report.by_status("missing")}
    assert "aten::mm" in missing and "aten::histc" in missing
    assert "aten::_grouped_mm" in {o.op for o in report.by_status("default_backend")}  # CompositeExplicitAutograd


def test_analyze_captures_whole_the_cia_ops_a_probed_backend_overrides(aten_impl: torch.library.Library) -> None:
    """Step 1 on a probed PrivateUse1 device: the CIA op its plugin overrides is captured whole
    and classified as its kernel."""
    from day0.spec.pipeline import spec_from_dict
    from day0.steps.analyze.run import analyze_model

    aten_impl.impl("softmax.int", lambda x, dim, dtype=None: x, "AutogradPrivateUse1")
    spec = spec_from_dict({"metadata": {"name": "x"}, "model": "tiny-qwen3-moe", "platform": "cpu"})
    npu = spec.platform.model_copy(update={"name": "npu-probe", "device_type": "npu"})
    assert npu.operator_library == "probe"
    result = analyze_model(spec.model, npu, "bf16")
    assert result.inventory.kept_whole == ["aten::softmax.int"]
    softmax = next(o for o in result.coverage.ops if o.op == "aten::softmax.int")
    assert softmax.status == "vendor_kernel" and softmax.modules == ["layers.0 (gqa+moe)"]
    assert "aten::softmax.int" in result.to_markdown()


@pytest.mark.parametrize("raises", [False, True])
def test_a_backend_fallback_is_what_a_call_through_it_does(raises: bool) -> None:
    """`_masked_scale` has no CPU kernel; a CPU boxed fallback serves it (default_backend, proven)
    if the call runs, and leaves it missing if the call raises."""

    def fallback(op: torch._ops.OpOverload, *args: torch.Tensor, **kwargs: object) -> torch.Tensor:
        if raises:
            raise NotImplementedError(f"{op} is not supported on this backend")
        return args[0].clone()

    example = [{"shape": [8], "dtype": "fp32"}, {"shape": [8], "dtype": "bool"}, 2.0]
    library = torch.library.Library("_", "IMPL")
    try:
        library.fallback(fallback, "CPU")
        [cov] = probe_device(_inventory(_record("aten::_masked_scale", example)), "cpu", "cpu").ops
    finally:
        library._destroy()
    if raises:
        assert cov.status == "missing" and cov.dtypes_proven == [] and "raised" in cov.detail, cov
    else:
        assert cov.status == "default_backend" and cov.dtypes_proven == ["fp32"] and "ran" in cov.detail, cov
