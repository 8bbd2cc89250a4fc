"""Loss-curve alignment: does the candidate train like the reference? Pure maths, no I/O.

Public practice (e.g. Ascend/NVIDIA porting guides, Megatron convergence checks): two runs with the
same data order and seeds are *aligned* when the mean relative loss error after warm-up is below 2%
(stricter guides use 1%) and the first step agrees to within 0.005 absolute or 0.5% relative (the
first loss is computed before any update, so it isolates forward numerics from optimizer effects).

    rel_err_t   = |cand_t - ref_t| / |ref_t|
    mean_rel    = mean(rel_err_t for t >= warmup_steps)          # 0-based index: step warmup_steps+1 on
    first_ok    = |cand_0 - ref_0| < first_step_abs  or  rel_err_0 < first_step_rel

The tolerances are the spec's `TrialTolerance` (`trial.tolerance`), the one model of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from day0.spec import TrialTolerance

__all__ = ["AlignmentReport", "compare_curves", "relative_errors"]


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
    tolerance: TrialTolerance
    loss_mean_ok: bool = Field(description="The mean relative error is under its tolerance.")
    first_step_ok: bool = Field(description="The first step agrees within either first-step bound.")
    passed: bool = Field(description="Every check passed (the two above, finite curves of equal length).")
    failures: list[str] = Field(default_factory=list, description="One clear sentence per failed check.")
    notes: list[str] = Field(default_factory=list)


def relative_errors(reference: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """|c - r| / |r| step by step (a zero reference uses the absolute difference)."""
    return [abs(c - r) / abs(r) if r != 0 else abs(c - r) for r, c in zip(reference, candidate)]


def _first_non_finite(values: Sequence[float]) -> int | None:
    return next((i for i, v in enumerate(values) if not math.isfinite(v)), None)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def compare_curves(
    reference: Sequence[float],
    candidate: Sequence[float],
    *,
    reference_grad_norm: Sequence[float] | None = None,
    candidate_grad_norm: Sequence[float] | None = None,
    tolerance: TrialTolerance | None = None,
) -> AlignmentReport:
    """Compare two per-step loss curves (index 0 = step 1) against `tolerance` (default: public practice)."""
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
    mean_ok = mean_rel < th.loss_mean_rel
    if not mean_ok:
        w = start + max(range(len(window)), key=window.__getitem__)
        failures.append(
            f"mean relative loss error from step {start + 1} on is {mean_rel:.2%}, over the "
            f"{th.loss_mean_rel:.2%} tolerance (worst at step {w + 1}: reference {ref[w]:.4f}, "
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

    grad_rel = None
    if reference_grad_norm is not None and candidate_grad_norm is not None:
        m = min(n, len(reference_grad_norm), len(candidate_grad_norm))
        g = relative_errors(reference_grad_norm[:m], candidate_grad_norm[:m])
        g = [x for x in g[min(start, m - 1) :] if math.isfinite(x)] if m else []
        grad_rel = _mean(g) if g else None
    return AlignmentReport(
        steps_compared=n,
        mean_window_start=start + 1,
        loss_mean_rel_error=mean_rel,
        loss_max_abs_diff=abs_diffs[worst],
        loss_max_abs_diff_step=worst + 1,
        first_step_abs_diff=first_abs,
        first_step_rel_diff=first_rel,
        final_loss_diff=cand[-1] - ref[-1],
        grad_norm_mean_rel_error=grad_rel,
        tolerance=th,
        loss_mean_ok=mean_ok,
        first_step_ok=first_ok,
        passed=not failures,
        failures=failures,
        notes=notes,
    )
