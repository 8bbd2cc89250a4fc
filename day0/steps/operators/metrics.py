"""Error metrics between a platform output and a reference, and the pass/fail verdict.

Pure functions. Everything is computed in float64 on the CPU so that the metric itself adds no
error. Thresholds are per dtype (torch.testing.assert_close's defaults unless the spec says
otherwise) plus a cosine floor: elementwise closeness catches local faults (a wrong epsilon on tiny
norms), cosine catches global ones (a permuted or scaled output) that a loose rtol could hide.
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field

from day0.core.precision import DEFAULT_TOLERANCES

__all__ = [
    "ErrorMetrics",
    "Thresholds",
    "compare",
    "default_thresholds",
    "ulp_error",
    "verdict",
    "within_control",
    "worst_figures",
]


class Thresholds(BaseModel):
    """What 'close enough' means for one dtype."""

    rtol: float = Field(gt=0)
    atol: float = Field(gt=0)
    min_cosine: float = Field(0.99, gt=0, le=1)
    max_share_beyond: float = Field(
        1e-3,
        ge=0,
        le=1,
        description=(
            "Share of elements allowed outside atol + rtol*|ref|: a few cancellation outliers in a "
            "reduction are rounding, a systematic fault moves many."
        ),
    )
    rms_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description=(
            "Elementwise outliers are forgiven while the RMS error stays under rtol * rms_share; "
            "0 forgives none (ops that round each element once)."
        ),
    )


def default_thresholds(dtype: str, min_cosine: float = 0.99) -> Thresholds:
    rtol, atol = DEFAULT_TOLERANCES.get(dtype, DEFAULT_TOLERANCES["fp32"])
    return Thresholds(rtol=rtol, atol=atol, min_cosine=min_cosine)


class ErrorMetrics(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="strings")  # an infinite error must survive JSON

    numel: int
    max_abs: float
    max_rel: float
    mean_rel: float
    cosine: float
    rmse: float
    rel_rmse: float = Field(description="RMSE / RMS(reference): scale-free size of the error.")
    share_beyond_tol: float
    max_ulp: float | None = Field(None, description="Max error in units in the last place of the compute dtype.")
    nan_inf_mismatch: int = Field(description="Elements that are NaN/Inf on one side only (or differ in sign of Inf).")

    def merge(self, other: ErrorMetrics) -> ErrorMetrics:
        """Worst of two (e.g. several outputs of one op, or several seeds)."""
        worst = {
            k: max(getattr(self, k), getattr(other, k))
            for k in ("max_abs", "max_rel", "mean_rel", "rmse", "rel_rmse", "share_beyond_tol", "nan_inf_mismatch")
        }
        ulps = [u for u in (self.max_ulp, other.max_ulp) if u is not None]
        return ErrorMetrics(
            numel=self.numel + other.numel,
            cosine=min(self.cosine, other.cosine),
            max_ulp=max(ulps) if ulps else None,
            **worst,
        )


def ulp_error(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """|actual - expected| in ULPs of `dtype` at the expected value (subnormal spacing below the
    smallest normal). Both inputs float64, finite."""
    info = torch.finfo(dtype)  # eps = 2**-mantissa bits, tiny = 2**min normal exponent
    _, exp = torch.frexp(expected)  # expected = m * 2**exp, 0.5 <= |m| < 1
    exp = torch.clamp(exp.to(torch.float64) - 1, min=math.log2(info.tiny))
    ulp = torch.pow(2.0, exp) * info.eps
    return (actual - expected).abs() / ulp


def compare(
    actual: torch.Tensor, expected: torch.Tensor, thresholds: Thresholds, compute_dtype: torch.dtype | None = None
) -> ErrorMetrics:
    """Metrics of `actual` (platform) against `expected` (reference), shapes must match."""
    if actual.shape != expected.shape:
        raise ValueError(f"shape mismatch: platform {tuple(actual.shape)} vs reference {tuple(expected.shape)}")
    a = actual.detach().to("cpu", torch.float64).flatten()
    e = expected.detach().to("cpu", torch.float64).flatten()
    fa, fe = torch.isfinite(a), torch.isfinite(e)
    mismatch = 0
    if not (bool(fa.all()) and bool(fe.all())):  # slow path only when something is NaN/Inf
        same = (torch.isnan(a) & torch.isnan(e)) | (torch.isinf(a) & torch.isinf(e) & (torch.sign(a) == torch.sign(e)))
        mismatch = int((~(fa & fe) & ~same).sum())
        ok = fa & fe
        a, e = a[ok], e[ok]
    n = a.numel()
    if n == 0:
        return ErrorMetrics(
            numel=0,
            max_abs=0.0,
            max_rel=0.0,
            mean_rel=0.0,
            cosine=1.0,
            rmse=0.0,
            rel_rmse=0.0,
            share_beyond_tol=0.0,
            nan_inf_mismatch=mismatch,
        )
    diff = (a - e).abs()
    e_abs = e.abs()
    rel = diff / e_abs.clamp_min(thresholds.atol)
    na, ne = float(a.norm()), float(e.norm())
    rmse = float(diff.norm()) / math.sqrt(n)
    ref_rms = ne / math.sqrt(n)
    if na == 0.0 and ne == 0.0:
        cosine = 1.0
    elif na == 0.0 or ne == 0.0:
        cosine = 0.0
    else:
        cosine = float(torch.dot(a, e) / (na * ne))
    beyond = diff > thresholds.atol + thresholds.rtol * e_abs
    max_ulp = None
    if compute_dtype is not None and compute_dtype.is_floating_point and compute_dtype != torch.float64:
        max_ulp = float(ulp_error(a, e.to(compute_dtype).to(torch.float64), compute_dtype).max())
    return ErrorMetrics(
        numel=n,
        max_abs=float(diff.max()),
        max_rel=float(rel.max()),
        mean_rel=float(rel.mean()),
        cosine=cosine,
        rmse=rmse,
        rel_rmse=rmse / ref_rms if ref_rms > 0 else (0.0 if rmse == 0 else math.inf),
        share_beyond_tol=float(beyond.double().mean()),
        max_ulp=max_ulp,
        nan_inf_mismatch=mismatch,
    )


def verdict(m: ErrorMetrics, t: Thresholds) -> tuple[bool, str]:
    """(passed, reason).

    Max abs error under atol passes outright (public per-API practice). Otherwise the error must
    keep cosine >= min_cosine, an RMS under rtol of the reference's RMS, and elementwise closeness
    (atol + rtol*|ref|) for all but `max_share_beyond` of the elements -- unless the RMS error is
    also under `rtol * rms_share`: then the outliers are cancellation in a low-precision reduction
    (an element near zero after adding rounded terms), which every kernel at that dtype shows,
    while a systematic fault (low-precision accumulation of a GEMM) raises the RMS as well.
    """
    if m.nan_inf_mismatch:
        return False, f"{m.nan_inf_mismatch} NaN/Inf mismatches"
    if m.max_abs <= t.atol:
        return True, "within atol"
    if m.cosine < t.min_cosine:
        return False, f"cosine {m.cosine:.6f} < {t.min_cosine}"
    if m.rel_rmse > t.rtol:
        return False, f"RMS error {m.rel_rmse:.3g} of the reference RMS > rtol {t.rtol:g}"
    if m.share_beyond_tol > t.max_share_beyond and m.rel_rmse > t.rtol * t.rms_share:
        return False, (
            f"{m.share_beyond_tol:.2%} of elements beyond rtol={t.rtol:g}/atol={t.atol:g} "
            f"(max rel {m.max_rel:.3g}, RMS error {m.rel_rmse:.3g})"
        )
    return True, "within tolerance"


def within_control(m: ErrorMetrics, stock: ErrorMetrics, factor: float, control: str) -> tuple[bool, str]:
    """(passed, reason): the platform's error `m` against the error `stock` that a correct computation
    at the same inputs, dtype and shapes makes (`control`: what that was, e.g. "the host's stock
    kernel"), both measured against the same reference.

    Why: the error of a correct kernel grows with the terms each output sums (its reduction length),
    the dtype it accumulates in and the inputs' value range (cancellation); fixed per-dtype
    tolerances, tuned at small widths, call a stock kernel wrong at a 163,840-token vocabulary. The
    control has all three built in. The platform passes while its RMS error, its largest absolute
    error and its cosine distance each stay within `factor` x the control's, and it has no NaN/Inf
    where the control has none."""
    if m.nan_inf_mismatch > stock.nan_inf_mismatch:
        return False, f"{m.nan_inf_mismatch} NaN/Inf mismatches ({control}: {stock.nan_inf_mismatch})"
    worse = [
        f"{what} {p:.3g} > {factor:g} x {control}'s {s:.3g}"
        for what, p, s in (
            ("RMS error", m.rel_rmse, stock.rel_rmse),
            ("max abs error", m.max_abs, stock.max_abs),
            ("cosine distance", 1.0 - m.cosine, max(1.0 - stock.cosine, 0.0)),
        )
        # a cosine computed in fp64 is exact to ~1e-15: closer than that is no distance
        if p > factor * s and not (what == "cosine distance" and p < 1e-12)
    ]
    if worse:
        return False, "; ".join(worse)
    return True, f"within {factor:g} x {control}'s error (RMS error {m.rel_rmse:.3g} vs {stock.rel_rmse:.3g})"


# A max relative error this many times the RMS error comes from elements whose reference is near
# zero (cancellation: the difference of rounded terms divided by almost nothing), not from a fault.
_NEAR_ZERO_RATIO = 100.0


def worst_figures(named: list[tuple[str, ErrorMetrics]]) -> str:
    """The worst RMS error, cosine and max relative error of several ops, each naming the op it comes
    from, e.g. `RMS error 0.00245, cosine 0.999997 (aten::index_put); max rel 0.009 (aten::mm)`; a max
    relative error that comes from elements whose reference is near 0 (cancellation) says so. "-" for none."""
    if not named:
        return "-"
    rms = max(named, key=lambda nm: nm[1].rel_rmse)
    cos = min(named, key=lambda nm: nm[1].cosine)
    rel = max(named, key=lambda nm: nm[1].max_rel)
    near_zero = rel[1].max_rel > _NEAR_ZERO_RATIO * max(rel[1].rel_rmse, 1e-300)
    figures = [
        (rms[0], f"RMS error {rms[1].rel_rmse:.3g}"),
        (cos[0], f"cosine {cos[1].cosine:.6f}"),
        (rel[0], f"max rel {rel[1].max_rel:.3g}"),
    ]
    groups: list[tuple[str, list[str]]] = []
    for op, text in figures:  # consecutive figures of one op share its name
        if groups and groups[-1][0] == op:
            groups[-1][1].append(text)
        else:
            groups.append((op, [text]))
    parts = [f"{', '.join(texts)} ({op})" for op, texts in groups]
    if near_zero:
        parts[-1] = parts[-1][:-1] + ", near-0 reference: cancellation)"
    return "; ".join(parts)
