"""The fault matrix's validation layers, each the library's own judgement:

- numerical: step 2's per-op check (`day0.steps.operators.opcheck.check_inventory`, at step 2's shape cap)
  of the inventory ops the faulty platform serves with its own kernels; every other op runs the
  stock kernel, which the clean platform's check of the whole inventory covers (once, at a smaller
  shape cap: 87 ops in ~3 s instead of ~55 s). Caught = an op with wrong numbers (a missing or
  raising kernel is a gap step 2 adapts, not a wrong answer); localised at the op; margin = how far
  its worst metric is over its bound (RMS error or max relative error over rtol, 1 - cosine over
  1 - min cosine; NaN/Inf = infinite). A size-dependent fault needs the real cap: the bf16-
  accumulated norm passes on 64k-element shapes and fails on step 2's;
- convergence: step 5's alignment (`day0.steps.trial.alignment.compare_curves`, thresholds from the
  reference's noise) of the candidate (bf16 autocast, the platform's kernels, the faults) against
  the stock fp32 reference; localised at the step where the curves part; margin = the failing
  figure over its threshold;
- performance: each kernel the platform's table provides, timed on step 1's example call against
  the kernel it replaces (the vendor's previous, correct version); caught when slower by more than
  `PERF_THRESHOLD`; localised at the op. Timing is this thread's CPU time on one intra-op thread
  (other processes' load does not count, unlike wall time), the median of paired ratios of batches
  run back to back. Why per kernel: the whole-step CPU time of a 30-step trial moved by 8% between
  clean seeds here, too much to see a kernel 20% slower inside a step it is a third of. The clean
  rows time the correct kernel against itself.
"""

from __future__ import annotations

import math
import statistics
import time
from functools import cache
from typing import Any

import torch

from day0.core.dtypes import DTYPES
from day0.core.ops import resolve_op
from day0.platforms.kernels import Platform
from day0.steps.operators.config import ValidationSpec
from day0.steps.trial.config import TrialTolerance
from day0.steps.trial.loop import LoopStep
from testsupport.fault_matrix.results import Detection
from testsupport.fault_matrix.training import WARMUP

__all__ = ["CLEAN_MAX_ELEMENTS", "PERF_THRESHOLD", "TOLERANCE", "convergence", "numerical", "performance"]

TOLERANCE = TrialTolerance(warmup_steps=WARMUP)  # the spec's defaults, warm-up scaled to a 30-step trial
PERF_THRESHOLD = 0.15  # three times the worst clean deviation measured here (+5.5%, the kernel against itself)
PERF_REPEATS, PERF_BATCH_S = 15, 0.01
CLEAN_MAX_ELEMENTS = 1 << 16  # the clean platform's whole-inventory check (see the module docstring)


def numerical(platform: Platform, clean_failing: set[str], dtype: str = "bf16") -> Detection:
    """Step 2's per-op check on `platform` (the clean CPU: every op; else the ops its table serves):
    ops with wrong numbers here and not on the clean platform."""
    from day0.steps.operators.op_policy import thresholds_for
    from day0.steps.operators.opcheck import check_inventory

    validation = ValidationSpec(seeds=2)
    inventory = _inventory()
    if platform.kernels.ops():
        ops = [op for op in platform.kernels.ops() if op in inventory.by_name()]
        if not ops:
            return Detection(layer="numerical", caught=False, detail="its kernels serve no op of step 1's inventory")
        report = check_inventory(inventory, platform, validation, [dtype], ops=ops)
    else:
        report = check_inventory(inventory, platform, validation, [dtype], max_elements=CLEAN_MAX_ELEMENTS)
    # wrong numbers only: a kernel that is missing or raises is a gap step 2 adapts, not a wrong answer
    bad = [c for c in report.checks if "fail" in (c.status, c.grad_status)]
    bad = [c for c in bad if c.op not in clean_failing]
    if not bad:
        return Detection(layer="numerical", caught=False, detail=f"{len(report.checks)} ops checked, none failing")
    t = thresholds_for(dtype, validation)

    def over(c: Any) -> float:
        m = c.metrics if c.status != "pass" else c.grad_metrics
        if m is None or m.nan_inf_mismatch:
            return math.inf
        return max(m.rel_rmse / t.rtol, (1 - m.cosine) / (1 - t.min_cosine), m.max_rel / t.rtol)

    worst = max(bad, key=over)
    return Detection(
        layer="numerical",
        caught=True,
        localised_at=", ".join(sorted(c.op for c in bad)),
        margin=over(worst),
        detail=f"{worst.op} at {dtype}: {worst.reason[:160]}",
    )


@cache
def _inventory():
    from day0.model.build import build_meta_model, load_hf_config
    from day0.model.source import resolve_model_source
    from day0.model.structure import analyze_structure
    from day0.steps.analyze.inventory import capture_operators

    model = build_meta_model(load_hf_config(resolve_model_source("tiny-deepseek-v3")), "tiny-deepseek-v3", "fp32")
    return capture_operators(model, analyze_structure(model, "tiny-deepseek-v3").attention_kind, "fp32")


def convergence(reference: list[LoopStep], candidate: list[LoopStep]) -> Detection:
    """Step 5's alignment with thresholds from the reference's own noise."""
    from day0.steps.trial.alignment import compare_curves, reference_noise

    ref_loss, ref_grad = [h.loss for h in reference], [h.grad_norm for h in reference]
    a = compare_curves(
        ref_loss,
        [h.loss for h in candidate],
        reference_grad_norm=ref_grad,
        candidate_grad_norm=[h.grad_norm for h in candidate],
        tolerance=TOLERANCE,
        noise=reference_noise(ref_loss, ref_grad, WARMUP),
    )
    ratios = [a.loss_mean_rel_error / a.loss_threshold]
    ratios += [a.first_step_abs_diff / TOLERANCE.first_step_abs] if not a.first_step_ok else []
    if a.grad_norm_median_rel_error is not None and a.grad_norm_threshold:
        ratios.append(a.grad_norm_median_rel_error / a.grad_norm_threshold)
    return Detection(
        layer="convergence",
        caught=not a.passed,
        localised_at=f"step {a.parted_at_step} ({a.parted_metric})" if a.parted_at_step else None,
        margin=max(ratios) if all(math.isfinite(r) for r in ratios) else math.inf,
        detail="; ".join(a.failures) or f"aligned: loss {a.loss_mean_rel_error:.3%} < {a.loss_threshold:.2%}",
    )


def _batch_seconds(platform: Platform, op: str, dtype: str, call: Any, n: int) -> float:
    """CPU time of `n` calls of the kernel `platform` runs for `op` (its table's, else the stock
    one), called directly: the dispatch mode's own overhead would dilute the kernel's difference."""
    entry = platform.kernels.lookup(op, dtype)
    fn = entry.fn if entry is not None else resolve_op(op)
    t0 = time.thread_time()
    for _ in range(n):
        fn(*call[0], **call[1])
    return time.thread_time() - t0


def _slowdown(platform: Platform, baseline: Platform, op: str, dtype: str, call: Any) -> float:
    """Median over paired, interleaved repeats of `platform`'s kernel CPU time over `baseline`'s, minus one."""
    once = max(_batch_seconds(baseline, op, dtype, call, 1), 1e-6)
    n = max(1, int(PERF_BATCH_S / once))
    ratios = []
    for _ in range(PERF_REPEATS):  # paired and interleaved: a slow moment of the host hits both sides
        base = _batch_seconds(baseline, op, dtype, call, n)
        ratios.append(_batch_seconds(platform, op, dtype, call, n) / max(base, 1e-9))
    return statistics.median(ratios) - 1


def performance(platform: Platform, baseline: Platform, dtype: str = "bf16") -> Detection:
    """Each of `platform`'s table kernels on step 1's example call, against `baseline`'s for the op."""
    from day0.core.ops import build_call

    records = _inventory().by_name()
    ops = [op for op in platform.kernels.ops() if op in records]
    slower: dict[str, float] = {}
    target = DTYPES[dtype]

    def dtype_for(name: str) -> torch.dtype:  # the inventory's fp32 becomes the compute dtype
        return target if name == "fp32" else DTYPES.get(name, torch.float32)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # this thread's CPU time is the kernel's only when it does all the work
    try:
        for op in ops:
            slower[op] = _slowdown(
                platform, baseline, op, dtype, build_call(op, records[op].examples[0], 0, dtype_for=dtype_for)
            )
    finally:
        torch.set_num_threads(threads)
    if not slower:
        return Detection(layer="performance", caught=False, detail="no table kernel on step 1's ops to time")
    worst = max(slower, key=slower.__getitem__)
    caught = slower[worst] > PERF_THRESHOLD
    return Detection(
        layer="performance",
        caught=caught,
        localised_at=worst if caught else None,
        margin=max(slower[worst], 0.0) / PERF_THRESHOLD,
        detail=", ".join(f"{op} {v:+.1%}" for op, v in slower.items())
        + f" CPU time vs the kernel replaced (threshold {PERF_THRESHOLD:.0%})",
    )
