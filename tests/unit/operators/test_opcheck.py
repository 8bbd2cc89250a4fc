"""Per-op checks on the clean CPU platform: input reconstruction, classification, and no false
alarms over the whole tiny DeepSeek-V3 inventory for several seeds."""

from __future__ import annotations

import math

import pytest
import torch

from day0.core.ops import build_call, example_numel
from day0.platforms.kernels import Platform
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.inputs import shrink_example
from day0.steps.operators.op_policy import classify
from day0.steps.operators.opcheck import check_inventory, check_op
from tests.fixtures.numerics import tiny_inventory


def test_classify() -> None:
    assert classify("aten::view") == "layout"
    assert classify("aten::transpose.int") == "layout"
    assert classify("aten::empty_like") == "nondeterministic"
    assert classify("aten::new_empty_strided") == "nondeterministic"
    assert classify("aten::arange.start") == "creation"
    assert classify("aten::mm") == "compute"


def test_index_inputs_are_valid() -> None:
    args, _ = build_call(
        "aten::embedding", [{"shape": [50, 4], "dtype": "fp32"}, {"shape": [2, 64], "dtype": "int64"}], 3
    )
    assert int(args[1].min()) >= 0 and int(args[1].max()) < 50
    args, _ = build_call(
        "aten::_grouped_mm",
        [{"shape": [32, 8], "dtype": "bf16"}, {"shape": [4, 8, 8], "dtype": "bf16"}, {"shape": [4], "dtype": "int32"}],
        0,
    )
    offs = args[2].tolist()
    assert offs == sorted(offs) and offs[-1] == 32 and args[2].dtype == torch.int32
    args, _ = build_call(
        "aten::gather", [{"shape": [16, 8], "dtype": "fp32"}, 1, {"shape": [16, 2], "dtype": "int64"}], 0
    )
    assert int(args[2].max()) < 8 and all(len(set(r)) == 2 for r in args[2].tolist())


def test_edge_values() -> None:
    args, _ = build_call("aten::_safe_softmax", [{"shape": [8, 16], "dtype": "bf16"}, -1], 0)
    assert float(args[0].max()) > 88.8  # exp overflows fp32/bf16 without the max subtraction
    args, _ = build_call("aten::rsqrt", [{"shape": [64], "dtype": "fp32"}], 0)
    assert float(args[0].min()) < 1e-5 and float(args[0].min()) > 0  # tiny norms, where eps matters
    args, kwargs = build_call(
        "aten::_to_copy", [{"shape": [2], "dtype": "int64"}, {"kwargs": {"dtype": "torch.float32"}}]
    )
    assert kwargs == {"dtype": torch.float32}


def test_shrink_keeps_shape_relations() -> None:
    ex = [{"shape": [64, 7168], "dtype": "bf16"}, {"shape": [7168, 2048], "dtype": "bf16"}]
    small = shrink_example(ex, 1 << 16)
    assert example_numel(small) <= 1 << 16
    assert small[0]["shape"][1] == small[1]["shape"][0]


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_clean_platform_no_false_alarms(dtype: str) -> None:
    inv = tiny_inventory("fp32")
    report = check_inventory(inv, Platform("cpu"), ValidationSpec(seeds=3), [dtype])
    assert len(report.checks) == len(inv.ops)
    bad = {c.op: c.reason for c in report.checks if not c.ok}
    # the host CPU really has no integer histc kernel (a true gap, adapted in test_adapt.py)
    assert bad.keys() == {"aten::histc"}, bad
    by = {c.op: c for c in report.checks}
    assert by["aten::mm"].metrics is not None and by["aten::mm"].grad_status == "pass"
    assert by["aten::empty_like"].kind == "nondeterministic" and "not compared" in by["aten::empty_like"].reason
    assert by["aten::view"].kind == "layout" and by["aten::view"].metrics.max_abs == 0
    if dtype == "bf16":
        assert by["aten::mm"].metrics.max_ulp is not None and by["aten::mm"].metrics.max_abs > 0
    assert "| `aten::mm` |" in report.to_markdown()


def test_big_example_is_shrunk() -> None:
    inv = tiny_inventory("fp32")
    check = check_op(inv.by_name()["aten::mm"], Platform("cpu"), "bf16", ValidationSpec(), max_elements=4096)
    assert check.status == "pass" and "shrunk" in check.reason


def test_huge_outputs_from_small_inputs_are_shrunk() -> None:
    from day0.core.ops import OpRecord

    # DeepSeek-V3's expert-weight gradient buffer: tiny input, 3.7G-element output
    rec = OpRecord(
        op="aten::new_zeros",
        calls=1,
        phases=["backward"],
        dtypes=["fp32"],
        examples=[[{"shape": [32, 256], "dtype": "fp32"}, [256, 2048, 7168], {"kwargs": {"dtype": "torch.float32"}}]],
    )
    check = check_op(rec, Platform("cpu"), "bf16", ValidationSpec(), max_elements=1 << 20)
    assert check.status == "pass" and "shrunk" in check.reason and check.examples == 1


def test_foreach_calls_are_rebuilt_and_compared_on_what_they_write() -> None:
    """A foreach op takes tensor lists and an in-place one returns nothing: the check rebuilds the
    lists from the example and compares the tensors the op updated (a kernel that skips one fails)."""
    from day0.core.ops import OpRecord

    shapes = [[64, 32], [32], [16, 8]]
    example = [[{"shape": s, "dtype": "fp32"} for s in shapes] for _ in range(3)] + [[-1e-3, -2e-3, -3e-3]]
    rec = OpRecord(op="aten::_foreach_addcdiv_.ScalarList", phases=["optimizer"], dtypes=["fp32"], examples=[example])
    params, _exp_avgs, denoms, steps = build_call(rec.op, example)[0]
    assert [list(p.shape) for p in params] == shapes and steps == [-1e-3, -2e-3, -3e-3]
    assert all(bool((d > 0).all()) for d in denoms)  # AdamW's denominator sqrt(v) + eps is positive
    v64 = ValidationSpec(reference_dtype="fp64")
    clean = check_op(rec, Platform("cpu"), "fp32", v64, "fp32")
    assert clean.status == "pass" and clean.metrics is not None and clean.metrics.numel == sum(map(math.prod, shapes))

    def skips_last(self, t1, t2, scalars):
        for p, a, d, s in list(zip(self, t1, t2, scalars, strict=True))[:-1]:
            p.addcdiv_(a, d, value=s)

    faulty = Platform("faulty")
    faulty.kernels.register(rec.op, skips_last)
    bad = check_op(rec, faulty, "fp32", v64, "fp32")
    assert bad.status == "fail" and bad.metrics is not None and bad.metrics.max_abs > 0


def test_adapted_foreach_kernel_writes_back_into_the_lists() -> None:
    from day0.steps.operators.opcheck import upcast_kernel

    xs = [torch.ones(3, dtype=torch.bfloat16), torch.ones(2, dtype=torch.bfloat16)]
    upcast_kernel(torch.ops.aten._foreach_mul_.Scalar)(xs, 3.0)
    assert all(x.dtype == torch.bfloat16 and bool((x == 3).all()) for x in xs)
