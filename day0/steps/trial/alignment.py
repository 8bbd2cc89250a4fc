"""Loss-curve alignment: does the candidate train like the reference? Pure maths, no I/O.

Public practice (e.g. Ascend/NVIDIA porting guides, Megatron convergence checks): two runs with the
same data order and seeds are *aligned* when the mean relative loss error after warm-up is below 2%
(stricter guides use 1%) and the first step agrees to within 0.005 absolute or 0.5% relative (the
first loss is computed before any update, so it isolates forward numerics from optimizer effects).

    rel_err_t   = |cand_t - ref_t| / |ref_t|
    mean_rel    = mean(rel_err_t for t >= warmup_steps)          # 0-based index: step warmup_steps+1 on
    first_ok    = |cand_0 - ref_0| < first_step_abs  or  rel_err_0 < first_step_rel

Thresholds with a reason (`ReferenceNoise`, `reference_noise`): a same-seed candidate shares the
reference's weights and batches, so only its numerics can move it; a run with another seed lies a
*seed-to-seed spread* away. The spread is estimated from the reference curve alone, cheaply: its
step-to-step residual against the local trend, r_t = y_t - (y_{t-1} + y_{t+1}) / 2, is batch noise
of per-step size sigma (Var r = 1.5 sigma^2 for white noise on a locally linear trend), taken
robustly (median |r| / 0.6745, so a gradient-norm spike does not inflate it), relative to the curve;
two independent runs then differ by E|y - y'| = 2 sigma / sqrt(pi) per step. Checked against real
seeds on the tiny trial model: estimate 1.2-2.5% for measured seed-to-seed differences of 1.6-2.0%.
The candidate may drift by `noise_fraction` of that spread (default a quarter) and never by more
than the spec's limits:

    threshold = min(limit, noise_fraction * 2 sigma_rel / sqrt(pi))
    loss:      mean(rel_err_t, t >= warm-up)                  < threshold(loss curve, loss_mean_rel)
    grad norm: median(rel_err_t of the grad norm, t >= warm-up) < threshold(grad-norm curve, grad_norm_median_rel)

The median, for the gradient norm, because single steps spike (a bf16 candidate's clean mean error
reached 20% from one spike while its median stayed under 3%). Without a noise estimate (too few
steps, `noise_fraction: null`, or no `noise` passed) the limits alone judge. Where the curves part:
the first step whose own relative error leaves the threshold band (or turns non-finite).

The tolerances are the spec's `TrialTolerance` (`trial.tolerance`), the one model of them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from day0.core.curves import relative_errors
from day0.steps.trial.config import TrialTolerance

__all__ = ["AlignmentReport", "ReferenceNoise", "compare_curves", "reference_noise", "seed_spread"]

_MIN_RESIDUALS = 5  # fewer residuals than this give no usable spread estimate


class ReferenceNoise(BaseModel):
    """The reference's own noise: the expected relative difference of a run with another seed."""

    loss_spread_rel: float = Field(description="2 sigma / sqrt(pi) of the loss, relative to the loss.")
    grad_norm_spread_rel: float | None = Field(None, description="The same for the gradient norm.")
    residuals: int = Field(description="Steps the estimate rests on.")
    source: str = "step-to-step residual of the reference curve"


def seed_spread(curve: Sequence[float], start: int = 0) -> tuple[float, int] | None:
    """(2 sigma_rel / sqrt(pi), residuals used) from steps `start` on (see the module docstring);
    None when fewer than `_MIN_RESIDUALS` finite residuals exist."""
    r = [
        (curve[t] - (curve[t - 1] + curve[t + 1]) / 2) / abs(curve[t])
        for t in range(max(start, 1), len(curve) - 1)
        if curve[t] != 0 and all(math.isfinite(curve[i]) for i in (t - 1, t, t + 1))
    ]
    if len(r) < _MIN_RESIDUALS:
        return None
    sigma = statistics.median(abs(x) for x in r) / 0.6745 / math.sqrt(1.5)
    return 2 * sigma / math.sqrt(math.pi), len(r)


def reference_noise(
    loss: Sequence[float], grad_norm: Sequence[float] | None = None, start: int = 0
) -> ReferenceNoise | None:
    """The reference's seed-to-seed spread from its own curves (None: too few steps after `start`)."""
    if start >= len(loss) - _MIN_RESIDUALS - 1:
        start = 0
    spread = seed_spread(loss, start)
    if spread is None:
        return None
    grad = seed_spread(grad_norm, start) if grad_norm else None
    return ReferenceNoise(
        loss_spread_rel=spread[0], grad_norm_spread_rel=grad[0] if grad else None, residuals=spread[1]
    )


class AlignmentReport(BaseModel):
    """The comparison's figures (steps are 1-based), the tolerance they were judged by and the verdict.
    A diverged curve gives infinite errors, saved in JSON as the string "Infinity"."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    steps_compared: int
    mean_window_start: int = Field(description="1-based first step in the mean error window.")
    loss_mean_rel_error: float
    loss_max_abs_diff: float
    loss_max_abs_diff_step: int = Field(description="1-based step of the largest difference.")
    first_step_abs_diff: float
    first_step_rel_diff: float
    final_loss_diff: float = Field(description="candidate - reference at the last compared step.")
    grad_norm_mean_rel_error: float | None = None
    grad_norm_median_rel_error: float | None = Field(None, description="Median over the window (what is judged).")
    tolerance: TrialTolerance
    noise: ReferenceNoise | None = Field(None, description="The reference's own noise the thresholds derive from.")
    loss_threshold: float = Field(description="What the mean loss error is judged by: min(limit, fraction x spread).")
    grad_norm_threshold: float | None = Field(None, description="The same for the grad-norm median error.")
    loss_mean_ok: bool = Field(description="The mean relative error is under its tolerance.")
    grad_norm_ok: bool = Field(True, description="The grad-norm median error is under its threshold (or not judged).")
    parted_at_step: int | None = Field(
        None, description="1-based first step whose own error leaves the threshold band (failed checks only)."
    )
    parted_metric: Literal["loss", "grad_norm"] | None = None
    first_step_ok: bool = Field(description="The first step agrees within either first-step bound.")
    passed: bool = Field(description="Every check passed (the two above, finite curves of equal length).")
    failures: list[str] = Field(default=[], description="One clear sentence per failed check.")
    notes: list[str] = Field(default=[])


def _first_non_finite(values: Sequence[float]) -> int | None:
    return next((i for i, v in enumerate(values) if not math.isfinite(v)), None)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _threshold(limit: float, spread: float | None, fraction: float | None) -> float:
    return min(limit, fraction * spread) if spread is not None and fraction is not None else limit


def _parted(rel: Sequence[float], threshold: float) -> int | None:
    """0-based first step whose relative error is beyond `threshold` (or not finite)."""
    return next((i for i, x in enumerate(rel) if not x <= threshold), None)


def compare_curves(
    reference: Sequence[float],
    candidate: Sequence[float],
    *,
    reference_grad_norm: Sequence[float] | None = None,
    candidate_grad_norm: Sequence[float] | None = None,
    tolerance: TrialTolerance | None = None,
    noise: ReferenceNoise | None = None,
) -> AlignmentReport:
    """Compare two per-step loss curves (index 0 = step 1) against `tolerance` (default: public
    practice), with thresholds derived from the reference's `noise` when given."""
    th = tolerance or TrialTolerance()
    failures: list[str] = []
    notes: list[str] = []
    n = min(len(reference), len(candidate))
    if n == 0:
        raise ValueError("compare_curves: both curves need at least one step")
    if len(reference) != len(candidate):
        failures.append(
            f"curves differ in length: reference has {len(reference)} steps, candidate "
            f"{len(candidate)}; compared the first {n}"
        )
    ref, cand = [float(x) for x in reference[:n]], [float(x) for x in candidate[:n]]
    if (bad := _first_non_finite(cand)) is not None:
        failures.append(f"candidate loss is not finite at step {bad + 1} ({cand[bad]}): training diverged")
    if (bad := _first_non_finite(ref)) is not None:
        failures.append(f"reference loss is not finite at step {bad + 1}: the reference itself is broken")

    rel = [x if math.isfinite(x) else math.inf for x in relative_errors(ref, cand)]  # a NaN step errs infinitely
    start = th.warmup_steps
    if start >= n:
        notes.append(f"only {n} steps, not more than warm-up ({th.warmup_steps}): mean error taken over all steps")
        start = 0
    window = rel[start:]
    mean_rel = _mean(window)
    abs_diffs = [abs(c - r) if math.isfinite(c - r) else math.inf for r, c in zip(ref, cand)]
    worst = max(range(n), key=abs_diffs.__getitem__)
    loss_th = _threshold(th.loss_mean_rel, noise.loss_spread_rel if noise else None, th.noise_fraction)
    why = _why(th.loss_mean_rel, loss_th, noise.loss_spread_rel if noise else None, th.noise_fraction)
    mean_ok = mean_rel < loss_th
    if not mean_ok:
        w = start + max(range(len(window)), key=window.__getitem__)
        failures.append(
            f"mean relative loss error from step {start + 1} on is {mean_rel:.2%}, over the "
            f"{loss_th:.2%} tolerance{why} (worst at step {w + 1}: reference {ref[w]:.4f}, "
            f"candidate {cand[w]:.4f})"
        )
    first_abs, first_rel = abs_diffs[0], rel[0]
    first_ok = first_abs < th.first_step_abs or first_rel < th.first_step_rel
    if not first_ok:
        failures.append(
            f"first-step loss differs by {first_abs:.4g} ({first_rel:.2%}): reference {ref[0]:.4f}, "
            f"candidate {cand[0]:.4f}; tolerance {th.first_step_abs} absolute or "
            f"{th.first_step_rel:.2%} relative (the forward pass or loss scaling disagrees)"
        )

    grad = _grad_norm_check(reference_grad_norm, candidate_grad_norm, n, start, th, noise)
    grad_ok = grad.ok
    if not grad_ok:
        failures.append(grad.failure)
    parted: int | None = None
    metric: Literal["loss", "grad_norm"] = "loss"
    if not (mean_ok and first_ok):
        parted = _parted(rel, loss_th)
    elif not grad_ok:
        parted, metric = grad.parted, "grad_norm"
    if failures and parted is not None:
        failures.append(f"the curves part at step {parted + 1} ({metric.replace('_', ' ')} first beyond its band)")
    return AlignmentReport(
        steps_compared=n,
        mean_window_start=start + 1,
        loss_mean_rel_error=mean_rel,
        loss_max_abs_diff=abs_diffs[worst],
        loss_max_abs_diff_step=worst + 1,
        first_step_abs_diff=first_abs,
        first_step_rel_diff=first_rel,
        final_loss_diff=cand[-1] - ref[-1],
        grad_norm_mean_rel_error=grad.mean,
        grad_norm_median_rel_error=grad.median,
        tolerance=th,
        noise=noise,
        loss_threshold=loss_th,
        grad_norm_threshold=grad.threshold,
        loss_mean_ok=mean_ok,
        first_step_ok=first_ok,
        grad_norm_ok=grad_ok,
        parted_at_step=None if parted is None else parted + 1,
        parted_metric=metric if parted is not None else None,
        passed=not failures,
        failures=failures,
        notes=notes,
    )


def _why(limit: float, threshold: float, spread: float | None, fraction: float | None) -> str:
    if spread is None or fraction is None or threshold >= limit:
        return ""
    return f" ({fraction:g} x the reference's seed-to-seed spread {spread:.2%}; limit {limit:.2%})"


class _GradCheck(BaseModel):
    mean: float | None = None
    median: float | None = None
    threshold: float | None = None
    ok: bool = True
    parted: int | None = None
    failure: str = ""


def _grad_norm_check(
    reference: Sequence[float] | None,
    candidate: Sequence[float] | None,
    n: int,
    start: int,
    th: TrialTolerance,
    noise: ReferenceNoise | None,
) -> _GradCheck:
    """The grad-norm median check over the mean window (skipped without both curves)."""
    if reference is None or candidate is None:
        return _GradCheck()
    m = min(n, len(reference), len(candidate))
    rel = [x if math.isfinite(x) else math.inf for x in relative_errors(reference[:m], candidate[:m])]
    window = rel[min(start, m - 1) :] if m else []
    finite = [x for x in window if math.isfinite(x)]
    if not window:
        return _GradCheck()
    spread = noise.grad_norm_spread_rel if noise else None
    threshold = _threshold(th.grad_norm_median_rel, spread, th.noise_fraction)
    median = statistics.median(window)
    ok = median < threshold
    failure = (
        ""
        if ok
        else f"median relative grad-norm error from step {min(start, m - 1) + 1} on is {median:.2%}, over the "
        f"{threshold:.2%} tolerance{_why(th.grad_norm_median_rel, threshold, spread, th.noise_fraction)} "
        "(the gradients are scaled or reduced wrongly)"
    )
    return _GradCheck(
        mean=_mean(finite) if finite else None,
        median=median,
        threshold=threshold,
        ok=ok,
        parted=None if ok else _parted(rel, threshold),
        failure=failure,
    )
