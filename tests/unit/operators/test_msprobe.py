"""Step 2 judged by msprobe's standards (`validation.tolerance: msprobe`): the standards read from an
msprobe wheel built here and served from a local find-links directory (never an index), from the
snapshot where no wheel is cached, the refusals when neither is there, and ops judged by them on a
platform whose kernel is off by a known number of ULPs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from day0.core.ops import OpRecord
from day0.errors import UsageError
from day0.platforms.kernels import Kernel, Platform
from day0.platforms.wheels import cached_wheel, fetch_wheel
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.job import OperatorsRequest
from day0.steps.operators.msprobe import (
    PACKAGE,
    REGISTRY_MEMBER,
    SNAPSHOT_DIR,
    STANDARD_MEMBER,
    THRESHOLD_MEMBER,
    MsprobeStandards,
    api_name,
    load_standards,
    read_wheel,
    snapshot_path,
    write_snapshot,
)
from day0.steps.operators.msprobe_judge import judge, ulp_errors
from day0.steps.operators.op_policy import msprobe_standards, remember_standards
from day0.steps.operators.opcheck import check_inventory, check_op
from day0.steps.operators.result import OperatorsResult
from tests.fixtures.numerics import cpu_spec, faulty_platform, tiny_inventory
from tests.fixtures.wheels import write_wheel

STANDARD_YAML = """\
AbsoluteThreshStandard:
  - add
  - mul
BinaryCompareStandard:
  - abs
  - neg
ULPStandard:
  - mm
ThousandthStandard:
  - conv2d
AccumulativeErrorStandard:
  - test_api
"""
THRESHOLD_YAML = """\
add:
  torch.float32:
    rtol: 1.0e-6
    small_value: 1.0e-6
    small_value_atol: 1.0e-9
  torch.bfloat16:
    rtol: 4.0e-3
    small_value: 1.0e-3
    small_value_atol: 1.0e-5
"""
# The two orders msprobe's StandardRegistry has picked a standard in: the API lists first for every
# floating output (earlier releases), or floating outputs to the benchmark standard first (26.2.0).
LISTS_FIRST = """
class StandardRegistry:
    def _get_standard_category(self, api_name, dtype=None):
        if dtype and dtype not in BINARY_COMPARE_UNSUPPORT_LIST:
            return 'binary_consistency'
        for name, category in self.standard_categories.items():
            if api_name in category:
                return name
        return "benchmark"
"""
FLOATS_FIRST = """
class StandardRegistry:
    def _get_standard_category(self, api_name, out_dtype, in_dtype):
        if is_dtype_fp8_or_hif8(out_dtype):
            return CompareConst.ULP_COMPARE
        if out_dtype in ("torch.float16", "torch.bfloat16", "torch.float32", torch.float32):
            return CompareConst.BENCHMARK
        if str(out_dtype) not in BINARY_COMPARE_UNSUPPORT_LIST:
            return CompareConst.BINARY_CONSISTENCY
        for name, category in self.api_standard_function_map.items():
            if api_name in category:
                return name
        return CompareConst.BENCHMARK
"""
LISTS_VERSION, FLOATS_VERSION = "0.1.0", "0.2.0"  # never a real release: the op_policy cache is per version


def _wheel(directory: Path, version: str, registry: str) -> Path:
    """A minimal mindstudio-probe wheel: the two YAML files and the registry's source."""
    members = {STANDARD_MEMBER: STANDARD_YAML, THRESHOLD_MEMBER: THRESHOLD_YAML, REGISTRY_MEMBER: registry}
    return write_wheel(directory, "mindstudio-probe", version, members)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A find-links directory serving both test releases."""
    links = tmp_path_factory.mktemp("links")
    _wheel(links, LISTS_VERSION, LISTS_FIRST)
    _wheel(links, FLOATS_VERSION, FLOATS_FIRST)
    return links


@pytest.fixture(scope="module")
def cache(served: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DAY0_CACHE holding both test releases, fetched through pip from `served` alone."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAY0_CACHE", str(root))
        mp.setenv("PIP_NO_INDEX", "1")
        mp.setenv("PIP_FIND_LINKS", str(served))
        snapshots = tmp_path_factory.mktemp("snapshots")
        for version in (LISTS_VERSION, FLOATS_VERSION):
            write_snapshot(version, snapshots)
    return root


@pytest.fixture
def in_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DAY0_CACHE", str(cache))
    return cache


def test_reader_takes_the_standards_and_their_provenance_from_the_wheel(in_cache: Path, served: Path) -> None:
    wheel = cached_wheel(PACKAGE, LISTS_VERSION)
    assert wheel is not None and wheel.path.read_bytes() == next(served.glob(f"*{LISTS_VERSION}*.whl")).read_bytes()
    s = read_wheel(wheel)
    assert s.standards["binary_consistency"] == ["abs", "neg"]
    assert s.standards["ulp_compare"] == ["mm"] and s.standards["absolute_threshold"] == ["add", "mul"]
    assert s.thresholds["add"]["bf16"].rtol == 4.0e-3 and s.thresholds["add"]["fp32"].small_value_atol == 1.0e-9
    assert s.wheel_sha256 == hashlib.sha256(wheel.path.read_bytes()).hexdigest()
    assert {m.path: m.sha256 for m in s.members}[STANDARD_MEMBER] == hashlib.sha256(STANDARD_YAML.encode()).hexdigest()
    # the registry's order, read from its source: which standard a floating output gets
    assert not s.float_outputs_benchmarked
    assert (s.standard("abs", True), s.standard("mm", True), s.standard("softmax", True)) == (
        "binary_consistency",
        "ulp_compare",
        "benchmark",
    )
    assert s.standard("mm", False) == "binary_consistency"  # integer and bool outputs: element by element
    floats = read_wheel(cached_wheel(PACKAGE, FLOATS_VERSION))  # type: ignore[arg-type]
    assert floats.float_outputs_benchmarked and floats.standard("abs", True) == "benchmark"


def test_snapshot_is_read_where_the_wheel_is_not_cached(
    in_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_wheel = load_standards(LISTS_VERSION, tmp_path)
    path = snapshot_path(LISTS_VERSION, tmp_path)
    path.write_text(from_wheel.model_dump_json())
    monkeypatch.setenv("DAY0_CACHE", str(tmp_path / "empty-cache"))
    assert load_standards(LISTS_VERSION, tmp_path) == from_wheel
    path.write_text(from_wheel.model_copy(update={"version": "0.9"}).model_dump_json())
    with pytest.raises(UsageError, match=r"validation\.msprobe_version: .* holds msprobe 0\.9, not 0\.1\.0"):
        load_standards(LISTS_VERSION, tmp_path)
    path.write_text("{}")
    with pytest.raises(UsageError, match="not an msprobe snapshot"):
        load_standards(LISTS_VERSION, tmp_path)


def test_neither_wheel_nor_snapshot_is_a_usage_error_naming_the_field_and_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAY0_CACHE", str(tmp_path))
    with pytest.raises(UsageError) as refused:
        load_standards("0.3.0", tmp_path)
    message = str(refused.value)
    assert "validation.msprobe_version" in message and "validation.tolerance: msprobe" in message
    assert "make tolerance-snapshots MSPROBE_VERSIONS=0.3.0" in message
    with pytest.raises(UsageError, match="is not a version"):
        load_standards("../x", tmp_path)
    with pytest.raises(ValueError, match="msprobe_version"):
        ValidationSpec(tolerance="msprobe", msprobe_version="latest")
    with pytest.raises(ValueError, match="tolerance"):
        ValidationSpec.model_validate({"tolerance": "numpy"})


def test_a_worker_judges_by_the_standards_the_run_resolved(in_cache: Path) -> None:
    """The run resolves the standards where it starts and sends them with step 2's request: a Ray
    worker with neither the wheel nor the snapshot judges by them."""
    resolved = load_standards(LISTS_VERSION).model_copy(update={"version": "0.4.0"})  # on no disk anywhere
    request = OperatorsRequest(inventory=tiny_inventory("fp32"), platform=cpu_spec(), msprobe=resolved)
    arrived = OperatorsRequest.model_validate_json(request.model_dump_json())
    assert arrived.msprobe == resolved
    validation = ValidationSpec(tolerance="msprobe", msprobe_version="0.4.0")
    with pytest.raises(UsageError, match=r"msprobe 0\.4\.0"):
        msprobe_standards(validation)
    remember_standards(arrived.msprobe)  # what the worker's run_request does first
    assert msprobe_standards(validation) == resolved


def test_committed_snapshot_is_the_real_wheels() -> None:
    wheel = fetch_wheel(PACKAGE, "26.2.0")  # from the cache, or from the package index into it (a cold machine)
    committed = MsprobeStandards.model_validate_json(snapshot_path("26.2.0", SNAPSHOT_DIR).read_bytes())
    real = read_wheel(wheel)
    identity = {"wheel", "wheel_sha256"}  # another interpreter's wheel holds the same members
    assert real.model_dump(exclude=identity) == committed.model_dump(exclude=identity)  # members' sha256 too
    if wheel.path.name == committed.wheel:
        assert real.wheel_sha256 == committed.wheel_sha256
    # 26.2.0 benchmarks every floating output before its lists: its lists reach no fp32/bf16 op
    assert committed.float_outputs_benchmarked and committed.standard("abs", True) == "benchmark"


def test_aten_names_map_onto_msprobes() -> None:
    assert [api_name(o) for o in ("aten::add.Tensor", "aten::add_.Tensor", "aten::gt.Scalar", "aten::mm")] == [
        "add",
        "add_",
        "greater",
        "mm",
    ]
    assert api_name("aten::constant_pad_nd") == "pad"


def _ulps_off(op: torch._ops.OpOverload, ulps: int) -> Kernel:
    """`op` with every fp32/bf16 output moved `ulps` units in the last place away from zero."""

    def kernel(*args: object, **kwargs: object) -> torch.Tensor:
        out = op(*args, **kwargs)
        bits = torch.int16 if out.dtype == torch.bfloat16 else torch.int32
        return (out.view(bits) + ulps).view(out.dtype)

    return kernel


def _platform(op: str, kernel: Kernel) -> Platform:
    platform = Platform("off-by-ulps")
    platform.kernels.register(op, kernel)
    return platform


def _record(op: str, *shapes: list[int], phases: tuple[str, ...] = ("optimizer",)) -> OpRecord:
    """An op with one example; run in the forward pass, its input gradients are checked too."""
    return OpRecord(
        op=op, phases=list(phases), dtypes=["fp32"], examples=[[{"shape": s, "dtype": "fp32"} for s in shapes]]
    )


def test_binary_compared_op_fails_on_one_ulp_that_torch_passes(in_cache: Path) -> None:
    record = _record("aten::abs", [32, 32])
    platform = _platform("aten::abs", _ulps_off(torch.ops.aten.abs.default, 1))
    by_torch = check_op(record, platform, "bf16", ValidationSpec(reference_dtype="fp64"))
    assert by_torch.status == "pass" and by_torch.policy == "torch"
    msprobe = ValidationSpec(reference_dtype="fp64", tolerance="msprobe", msprobe_version=LISTS_VERSION)
    by_msprobe = check_op(record, platform, "bf16", msprobe)
    assert by_msprobe.status == "fail" and by_msprobe.policy == "msprobe (binary_consistency)"
    assert "1024 of 1024 elements differ" in by_msprobe.reason
    assert check_op(record, Platform("cpu"), "bf16", msprobe).status == "pass"  # the exact kernel


def test_ulp_compared_op_is_judged_in_ulps(in_cache: Path) -> None:
    """fp32 passes msprobe's ULP standard with a mean ULP error under 64, whatever torch's rtol says;
    the input gradients (computed by the same kernel) are judged by the same standard."""
    record = _record("aten::mm", [16, 32], [32, 16], phases=("forward",))
    msprobe = ValidationSpec(reference_dtype="fp64", tolerance="msprobe", msprobe_version=LISTS_VERSION)
    twenty = _platform("aten::mm", _ulps_off(torch.ops.aten.mm.default, 20))
    by_torch = check_op(record, twenty, "fp32", ValidationSpec(reference_dtype="fp64"))
    assert (by_torch.status, by_torch.grad_status) == ("fail", "fail")  # beyond rtol 1.3e-6
    passed = check_op(record, twenty, "fp32", msprobe)
    assert (passed.status, passed.grad_status) == ("pass", "pass"), passed.reason
    assert passed.policy == "msprobe (ulp_compare)"
    assert "ULP at fp32: mean 2" in passed.reason  # about 20 ULPs, and the rounding of the host's sum
    hundred = check_op(record, _platform("aten::mm", _ulps_off(torch.ops.aten.mm.default, 100)), "fp32", msprobe)
    assert (hundred.status, hundred.grad_status) == ("fail", "fail") and "ULP at fp32: mean 1" in hundred.reason


def test_26_2_orders_floating_outputs_to_the_benchmark_standard(in_cache: Path) -> None:
    """Where the registry benchmarks floating outputs first, abs is judged against the host's kernel:
    a 1-ULP error on every element is 256 times the host's small-value error share (floored at 2**-8)."""
    record = _record("aten::abs", [32, 32])
    platform = _platform("aten::abs", _ulps_off(torch.ops.aten.abs.default, 1))
    v = ValidationSpec(reference_dtype="fp64", tolerance="msprobe", msprobe_version=FLOATS_VERSION)
    check = check_op(record, platform, "bf16", v)
    assert check.status == "fail" and check.policy == "msprobe (benchmark)"
    assert "small-value error share 256x the host's" in check.reason
    assert "lists abs as binary_consistency but benchmarks floating outputs first" in check.reason
    assert check_op(record, Platform("cpu"), "bf16", v).status == "pass"  # the host's own kernel


def test_benchmark_standard_leaves_nan_out_and_the_check_says_so(in_cache: Path) -> None:
    """A softmax without the max subtraction overflows to NaN on large logits: torch's tolerances fail
    it; msprobe's benchmark standard leaves NaN/Inf elements out of its metrics and passes it, as
    msprobe would, and the check says what it did not see."""
    platform, ops = faulty_platform("softmax_without_max"), ["aten::_safe_softmax"]
    by_torch = check_inventory(tiny_inventory("fp32"), platform, ValidationSpec(), ["bf16"], ops=ops, grads=False)
    assert by_torch.checks[0].status == "fail" and "NaN/Inf mismatches" in by_torch.checks[0].reason
    v = ValidationSpec(tolerance="msprobe", msprobe_version=FLOATS_VERSION)
    check = check_inventory(tiny_inventory("fp32"), platform, v, ["bf16"], ops=ops, grads=False).checks[0]
    assert check.status == "pass" and check.policy == "msprobe (benchmark)"
    assert check.metrics is not None and check.metrics.nan_inf_mismatch > 0
    assert "msprobe's benchmark standard leaves such elements out of its metrics" in check.reason


def test_report_names_each_ops_policy(in_cache: Path) -> None:
    inventory = tiny_inventory("fp32")
    ops = ["aten::mm", "aten::topk", "aten::eq.Tensor", "aten::empty_like"]
    v = ValidationSpec(tolerance="msprobe", msprobe_version=LISTS_VERSION)
    report = check_inventory(inventory, Platform("cpu"), v, ["fp32"], ops=ops, grads=False)
    policy = {c.op: c.policy for c in report.checks}
    assert policy == {
        "aten::mm": "msprobe (ulp_compare)",
        "aten::topk": "msprobe (benchmark, binary_consistency)",  # values, and indices element by element
        "aten::eq.Tensor": "msprobe (binary_consistency)",  # a bool output
        "aten::empty_like": "torch",  # random memory: values not compared by either
    }
    assert all(c.ok for c in report.checks), report.to_markdown()
    text = report.to_markdown()
    assert report.tolerance.startswith(f"msprobe {LISTS_VERSION} (mindstudio-probe wheel sha256 ")
    assert f"Tolerance: {report.tolerance}" in text and "| **pass** | msprobe (ulp_compare) |" in text
    judged_by = OperatorsResult(ops=report).headline["judged by"]  # in the scorecard's numerical row
    assert judged_by.startswith(f"{report.tolerance}: ") and "1 torch" in judged_by
    assert "1 msprobe (ulp_compare)" in judged_by


def test_standards_measure_as_msprobe_defines() -> None:
    one = torch.tensor([1.0, 0.0], dtype=torch.float64)
    # fp32: 1 ULP at 1.0 is 2**-23; a zero reference is measured in ULPs of 1.0 too (msprobe's eb = 0)
    assert ulp_errors(torch.tensor([1.0 + 2**-23, 2**-23], dtype=torch.float64), one, "fp32").tolist() == [1.0, 1.0]
    assert ulp_errors(torch.tensor([1.0 + 2**-7], dtype=torch.float64), one[:1], "bf16").tolist() == [1.0]
    s = MsprobeStandards(
        version="x",
        wheel="w",
        wheel_sha256="0",
        members=[],
        standards={},
        thresholds={},
        float_outputs_benchmarked=True,
    )
    golden = torch.linspace(0.5, 2.0, 1000, dtype=torch.float64)
    bench = (golden * (1 + 1e-3)).float()
    assert judge("benchmark", "softmax", (golden * (1 + 1.9e-3)).float(), golden, bench, s)[0]  # within 2x the host's
    ok, why = judge("benchmark", "softmax", (golden * (1 + 2.1e-3)).float(), golden, bench, s)
    assert not ok and "RMSE 2.1x the host's (limit 2)" in why
    ok, why = judge("benchmark", "mm", (golden * (1 + 1.3e-3)).float(), golden, bench, s)  # mm is level L2: 1.2x
    assert not ok and "benchmark (L2)" in why
    # the absolute threshold without a threshold-YAML entry: StandardConfig's fp32 rtol, 2**-20
    assert judge("absolute_threshold", "add", (golden * (1 + 2**-21)).float(), golden, None, s)[0]
    assert not judge("absolute_threshold", "add", (golden * (1 + 2e-6)).float(), golden, None, s)[0]
