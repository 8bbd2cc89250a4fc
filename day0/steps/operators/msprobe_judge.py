"""msprobe's accuracy standards applied to one output: the platform's (`actual`, msprobe's "device"
output), the reference (`golden`, msprobe's CPU bench at high precision) and, for the standards that
compare the platform's error with a trusted kernel's, the host's stock kernel at the platform's dtype
(`bench`, msprobe's GPU run). Pure functions on tensors, in float64.

Each follows msprobe 26.2.0's code (`pytorch/api_accuracy_checker/`: `compare/algorithm.py`, the
classes of `precision_standard/` and their verdicts in `compare/api_precision_compare.py`); the
constants below are transcribed from its `standard_config.py`, `compare_utils.py` and
`core/common/const.py`, which are Python, not data (`day0.steps.operators.msprobe` reads the data):

- binary_consistency: every element equal (`bench != device`, so a NaN on both sides differs, as in msprobe).
- absolute_threshold: no element off: |reference| <= small_value is a small value whose absolute error
  must stay within small_value_atol; every other finite element's relative error, |err| / (|ref| + eps),
  within rtol; an Inf/NaN on one side passes only when the values clipped to the dtype's range are
  within rtol (or both NaN). eps: the reference dtype's, bf16's 2**-8 at bf16, as msprobe's
  `get_abs_bench_with_eps`. Figures: the op's entry in the threshold YAML, else StandardConfig's per dtype.
- ulp_compare: ULP error |actual - ref| * 2**(mantissa bits - e), e = floor(log2 |ref|) but at least the
  dtype's least normal exponent, and e = 0 where ref == 0 (msprobe's quirk: a zero reference is
  measured in ULPs of 1.0). fp32 passes with a mean ULP error under 64 or under 5% of elements beyond
  32 ULPs; fp16/bf16 with under 0.1% beyond 1 ULP; either passes too when its share beyond is below
  the bench's (ratio < 1, the bench's share floored at the dtype's minimum error).
- thousandth_threshold: at least 99.9% of elements with relative error under 0.001.
- benchmark: the platform's small-value error share, RMSE, max and mean relative error, each divided
  by the bench's (floored at the dtype's minimum error: fp16 2**-11, bf16 2**-8, fp32 2**-14), within
  2 (small values) and the API level's limits (L0 10/2/2 for max rel/mean rel/RMSE; L1 5/1.5/1.5 for
  embedding and scatter; L2 2/1.2/1.2 for matmuls, sum, layer_norm, index ...). A metric Inf/NaN on
  one side only fails; an element Inf/NaN on either side is left out of every metric, so an output
  that is NaN where the reference is finite can pass (the op's check then says so).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from day0.core.dtypes import dtype_name
from day0.steps.operators.msprobe import MsprobeStandards, Standard

__all__ = ["BENCH_STANDARDS", "JUDGED_DTYPES", "judge"]

JUDGED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""Floating dtypes msprobe's standards judge (fp64 and complex outputs it skips)."""
BENCH_STANDARDS: frozenset[Standard] = frozenset({"benchmark", "ulp_compare"})
"""Standards that compare the platform's error with the bench's."""

_BF16_EPS = 2.0**-8  # CompareConst.BFLOAT16_EPS
_BF16_MAX = 3.3895313892515355e38  # CompareConst.BFLOAT16_MAX
# StandardConfig: the absolute-threshold standard's per-dtype figures (rtol, small_value, small_value_atol),
# for an op the threshold YAML has no entry for
_ABSOLUTE_DEFAULTS = {
    "fp16": (2**-10, 2**-10, 2**-16),
    "bf16": (2**-8, 2**-10, 1e-16),
    "fp32": (2**-20, 2**-20, 2**-30),
}
# ULP_PARAMETERS: (least normal exponent, mantissa bits); StandardConfig and CompareConst's ULP limits
_ULP = {"fp16": (-14, 10), "bf16": (-126, 7), "fp32": (-126, 23)}
_ULP_BEYOND = {"fp32": 32.0, "fp16": 1.0, "bf16": 1.0}  # ULP_FLOAT32_THRESHOLD, ULP_FLOAT16_THRESHOLD
_ULP_MEAN_FP32 = 64.0
_ULP_SHARE = {"fp32": 0.05, "fp16": 0.001, "bf16": 0.001}
# StandardConfig._small_value, _benchmark_small_value_atol, _minmum_err
_BENCH_SMALL = {"fp16": (2**-10, 1e-16), "bf16": (2**-10, 1e-16), "fp32": (2**-20, 2**-30)}
_MIN_ERR = {"fp16": 2**-11, "bf16": 2**-8, "fp32": 2**-14}
_SMALL_RATIO = 2.0  # StandardConfig._small_value_threshold['error_threshold']
_LEVELS = {  # StandardConfig.get_benchmark_ratio_threshold: (max rel, mean rel, RMSE)
    "L0": (10.0, 2.0, 2.0),
    "L1": (5.0, 1.5, 1.5),
    "L2": (2.0, 1.2, 1.2),
}
_L1 = {"embedding", "npu_fusion_attention_grad", "npu_fusion_attention", "scatter_", "scatter_add_"}
_L2 = {
    "addmm",
    "npu_cross_entropy_loss",
    "npu_cross_entropy_loss_backward",
    "GELU",
    "layer_norm",
    "matmul",
    "mm",
    "index",
    "one_hot",
    "sum",
    "npu_rms_norm",
    "npu_rms_norm_backward",
    "nonzero",
}


def _eps(golden_dtype: torch.dtype, dt: str) -> float:
    return _BF16_EPS if dt == "bf16" else torch.finfo(golden_dtype).eps


def _as_compared(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`t` rounded to the dtype msprobe holds the platform's output in: bf16 as fp32 (numpy has no bf16)."""
    return t.to(torch.float32 if dtype == torch.bfloat16 else dtype).to(torch.float64)


def _share(mask: torch.Tensor, among: torch.Tensor) -> float:
    n = int(among.sum())
    return float((mask & among).sum()) / n if n else 0.0


def binary(actual: torch.Tensor, golden: torch.Tensor) -> tuple[bool, str]:
    differ = int((actual.to(golden.dtype) != golden).sum())
    if differ == 0:
        return True, "binary consistency: every element equal"
    return False, f"binary consistency: {differ} of {golden.numel()} elements differ"


def absolute(
    actual: torch.Tensor,
    golden: torch.Tensor,
    figures: tuple[float, float, float],
    dt: str,
    eps: float,
    dtype: torch.dtype,
) -> tuple[bool, str]:
    rtol, small_value, atol = figures
    a, g = actual.double(), golden.double()
    finite = torch.isfinite(a) & torch.isfinite(_as_compared(g, dtype))
    err = (a - g).abs()
    small = (g.abs() <= small_value) & finite
    normal = finite & ~small
    rel = err / (g.abs() + eps)
    beyond_rtol = _share(rel > rtol, normal)
    beyond_atol = _share(err > atol, small)
    top = _BF16_MAX if dtype == torch.bfloat16 else torch.finfo(dtype).max
    clipped = (a.clamp(-top, top) - _as_compared(g, dtype).clamp(-top, top)).abs() / (g.abs() + eps)
    passing = (clipped <= rtol) | (torch.isnan(a) & torch.isnan(g))
    inf_nan = _share(~passing, ~finite)
    ok = beyond_rtol == 0 and beyond_atol == 0 and inf_nan == 0
    return ok, (
        f"absolute threshold at {dt} (rtol {rtol:g}, small value {small_value:g}, atol {atol:g}): "
        f"{beyond_rtol:.3g} of normal values beyond rtol, {beyond_atol:.3g} of small values beyond atol, "
        f"{inf_nan:.3g} of Inf/NaN inconsistent"
    )


def ulp_errors(actual: torch.Tensor, golden: torch.Tensor, dt: str) -> torch.Tensor:
    least, mantissa = _ULP[dt]
    g = golden.double()
    e = torch.where(g == 0, torch.zeros_like(g), torch.floor(torch.log2(g.abs()))).clamp_min(least)
    return (actual.double() - g).abs() * torch.exp2(mantissa - e)


def _ratio(npu: float, gpu: float, dt: str) -> float:
    return abs(npu) / max(abs(gpu), _MIN_ERR[dt])


def _consistent(npu: float, gpu: float) -> bool:
    """msprobe's check_inf_or_nan: a metric Inf/NaN on one side passes only if the other is the same."""
    return (math.isnan(npu) and math.isnan(gpu)) or (math.isinf(npu) and npu == gpu)


def ulp(actual: torch.Tensor, golden: torch.Tensor, bench: torch.Tensor | None, dt: str) -> tuple[bool, str]:
    err = ulp_errors(actual, golden, dt)
    mean, share = float(err.mean()), float((err > _ULP_BEYOND[dt]).double().mean())
    ratio = math.nan
    if bench is not None:
        b_err = ulp_errors(bench, golden, dt)
        b_mean, b_share = float(b_err.mean()), float((b_err > _ULP_BEYOND[dt]).double().mean())
        if not all(map(math.isfinite, (mean, b_mean))) and not _consistent(mean, b_mean):
            return False, f"ULP: mean ULP error {mean:.3g}, the host's {b_mean:.3g}"
        ratio = _ratio(share, b_share, dt)
    beyond = f"{share:.3g} of elements beyond {_ULP_BEYOND[dt]:g} ULP"
    figures = f"ULP at {dt}: mean {mean:.3g} ULP, {beyond}" + (
        f", {ratio:.3g}x the host's share" if bench is not None else ""
    )
    ok = (dt == "fp32" and mean < _ULP_MEAN_FP32) or share < _ULP_SHARE[dt] or ratio < 1
    return ok, figures


def thousandth(actual: torch.Tensor, golden: torch.Tensor, eps: float) -> tuple[bool, str]:
    rel = (actual.double() - golden.double()).abs() / (golden.double().abs() + eps)
    within = float((rel < 1e-3).double().mean())
    return within >= 0.999, f"thousandth: {within:.4%} of elements within 0.001 relative error (needs 99.9%)"


class _Golden(NamedTuple):
    """What the benchmark standard measures both sides against, computed once for both."""

    values: torch.Tensor
    finite: torch.Tensor  # finite at the platform's dtype
    small: torch.Tensor  # |reference| <= small_value
    denominator: torch.Tensor  # |reference| + eps


def _bench_metrics(actual: torch.Tensor, golden: _Golden, atol: float) -> tuple[float, float, float, float]:
    """(small-value error share, RMSE, max rel, mean rel) of `actual` against `golden`: BenchmarkCompare's,
    where an element Inf/NaN on either side or small counts in none but the first (its relative error -1)."""
    inf_nan = ~(torch.isfinite(actual) & golden.finite)
    err = (actual.double() - golden.values).abs_()
    masked = golden.small | inf_nan
    small_share = _share(err > atol, golden.small & ~inf_nan)
    n, cnt = err.numel(), int(masked.sum())
    kept = err.masked_fill_(masked, 0.0)
    mse = float(kept.square().mean()) * (n / (n - cnt + 1e-4) + 1e-4)
    rel = kept.div_(golden.denominator)  # 0 where masked: below every kept relative error, or none is kept
    if n == cnt:
        return small_share, math.sqrt(mse), 0.0, 0.0
    return small_share, math.sqrt(mse), float(rel.max()), float(rel.sum()) / (n - cnt)


def benchmark(
    actual: torch.Tensor, golden: torch.Tensor, bench: torch.Tensor, api: str, dt: str, eps: float, dtype: torch.dtype
) -> tuple[bool, str]:
    level = "L2" if api in _L2 else "L1" if api in _L1 else "L0"
    max_rel, mean_rel, rmse = _LEVELS[level]
    limits = {"small-value error share": _SMALL_RATIO, "RMSE": rmse, "max rel": max_rel, "mean rel": mean_rel}
    small_value, atol = _BENCH_SMALL[dt]
    g = golden.double()
    ref = _Golden(g, torch.isfinite(_as_compared(g, dtype)), g.abs() <= small_value, g.abs() + eps)
    npu = _bench_metrics(actual, ref, atol)
    gpu = _bench_metrics(bench, ref, atol)
    over = []
    for (name, limit), x, y in zip(limits.items(), npu, gpu, strict=True):
        if not (math.isfinite(x) and math.isfinite(y)):
            if not _consistent(x, y):
                over.append(f"{name} {x:.3g} vs the host's {y:.3g}")
        elif (r := _ratio(x, y, dt)) > limit:
            over.append(f"{name} {r:.3g}x the host's (limit {limit:g})")
    if over:
        return False, f"benchmark ({level}) at {dt}: " + "; ".join(over)
    return True, f"benchmark ({level}) at {dt}: RMSE {npu[1]:.3g} vs the host's {gpu[1]:.3g}"


def judge(
    standard: Standard,
    api: str,
    actual: torch.Tensor,
    golden: torch.Tensor,
    bench: torch.Tensor | None,
    standards: MsprobeStandards,
) -> tuple[bool, str]:
    """(passed, reason) of one output under `standard` (msprobe's name for the op: `api`). `actual` is
    at the platform's dtype, `golden` the reference, `bench` (the standards of `BENCH_STANDARDS`)
    the host's stock kernel's output at the platform's dtype."""
    a, g = actual.detach().cpu(), golden.detach().cpu()
    if standard == "binary_consistency":
        return binary(a, g)
    dtype = a.dtype
    dt = dtype_name(dtype)
    eps = _eps(g.dtype, dt)
    b = bench.detach().cpu() if bench is not None else None
    if standard == "absolute_threshold":
        figures = standards.thresholds.get(api, {}).get(dt)
        return absolute(
            a,
            g,
            (figures.rtol, figures.small_value, figures.small_value_atol) if figures else _ABSOLUTE_DEFAULTS[dt],
            dt,
            eps,
            dtype,
        )
    if standard == "ulp_compare":
        return ulp(a, g, b, dt)
    if standard == "thousandth_threshold":
        return thousandth(a, g, eps)
    if standard == "benchmark" and b is not None:
        return benchmark(a, g, b, api, dt, eps, dtype)
    raise ValueError(f"day0 does not apply msprobe's {standard} standard here")
