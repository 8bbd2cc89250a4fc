"""The training loop run bare (no Ray): deterministic, and injected training bugs fail alignment
with a clear message while faithful variants (recompute, micro-batching, bf16 autocast) stay aligned."""

from __future__ import annotations

import pytest

from day0.steps.trial.alignment import compare_curves
from day0.steps.trial.config import TrialTolerance
from day0.steps.trial.faults import TrialFaults
from day0.steps.trial.loop import LoopStep, lr_at, run_steps
from tests.fixtures.trial import tiny_data, tiny_loop

STEPS = 24
TOL = TrialTolerance(warmup_steps=8)  # a short trial: mean error from step 9 on


def _curve(steps: int = STEPS, hooks: TrialFaults | None = None, **overrides) -> list[LoopStep]:
    history = run_steps(tiny_loop(steps, **overrides), tiny_data().tokens, hooks=hooks)
    return [LoopStep.model_validate(h) for h in history]


@pytest.fixture(scope="module")
def reference() -> list[LoopStep]:
    return _curve()


def _compare(ref: list[LoopStep], cand: list[LoopStep]):
    return compare_curves(
        [h.loss for h in ref],
        [h.loss for h in cand],
        reference_grad_norm=[h.grad_norm for h in ref],
        candidate_grad_norm=[h.grad_norm for h in cand],
        tolerance=TOL,
    )


def test_reference_learns_and_is_deterministic(reference: list[LoopStep]) -> None:
    assert len(reference) == STEPS and reference[-1].loss < reference[0].loss - 0.5
    assert 6.0 < reference[0].loss < 6.5  # ~ln(512) = 6.24 at initialisation
    again = _curve(steps=6)
    assert [h.loss for h in again] == [h.loss for h in reference[:6]]  # bitwise: same seed, same data order


@pytest.mark.parametrize(
    "overrides",
    [
        {"recompute": "full"},  # activation checkpointing recomputes the same values
        {"micro_batch": 2},  # gradient accumulation over 2 micro-batches
        {"compute_dtype": "bf16"},  # bf16 autocast, fp32 master weights
    ],
    ids=["recompute", "grad-accum", "bf16-autocast"],
)
def test_faithful_variants_align(reference: list[LoopStep], overrides: dict) -> None:
    report = _compare(reference, _curve(**overrides))
    assert report.passed, report.failures


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        (TrialFaults(loss_scale=0.5), "first-step loss differs"),
        (TrialFaults(skip_optimizer_step=True), "mean relative loss error"),
        (TrialFaults(lr_multiplier=10.0), "mean relative loss error"),
        (TrialFaults(nan_at_step=5), "candidate loss is not finite at step 6"),
    ],
    ids=["wrong-loss-scaling", "broken-optimizer-step", "lr-x10", "diverged"],
)
def test_injected_bugs_fail_alignment(reference: list[LoopStep], faults: TrialFaults, message: str) -> None:
    report = _compare(reference, _curve(hooks=faults))
    assert not report.passed
    assert any(message in f for f in report.failures), report.failures


def test_lr_schedule_is_a_function_of_the_step() -> None:
    cfg = tiny_loop(lr_warmup_steps=4, learning_rate=1.0)
    assert [lr_at(s, cfg) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
