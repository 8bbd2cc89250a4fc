"""The cost model's prediction of step 5's own candidate (`predict_trial`) against quantities that need no
clock: the training memory counted from the tensors, and the host-dispatch figure a profile carries.
(Times are checked by `make bench`, `bench_trial.cost_check`, never here.)"""

from __future__ import annotations

import pytest
import torch

from day0.core.model_source import resolve_model_source
from day0.planner.profile import CalibratedProfile
from day0.spec import load_spec
from day0.trial.loop import run_steps
from day0.trial.model import build_model, scale_config
from day0.trial.step import TrialPlan, candidate_loop
from tasks.trial import PlannerMemoryEstimate

SPEC = "configs/pipelines/tiny-local.yaml"


@pytest.fixture(scope="module")
def candidate():
    spec = load_spec(SPEC)
    cfg = scale_config(
        resolve_model_source(spec.model.source).config, spec.trial.scale, vocab_size=512, seq_len=64, eos_token_id=1
    )
    return spec, cfg, candidate_loop(spec, cfg, TrialPlan())


def _predict(hardware, loop, cfg, profile=None, workers: int = 2):
    """Step 5's own prediction of its candidate (what the trial task puts beside the measurement)."""
    return PlannerMemoryEstimate(hardware, profile).predict(cfg, TrialPlan(), loop, workers)


def test_predicted_peak_is_the_counted_training_memory(candidate) -> None:
    """The loop counts its own training memory from the tensors (its `memory` event) on its first step;
    the prediction of the same configuration is within 10% of it."""
    spec, cfg, loop = candidate
    events: list[dict] = []
    loop = loop.model_copy(update={"steps": 2})
    run_steps(loop, torch.randint(0, 512, (4096,)), log=lambda kind, **kw: events.append({"kind": kind, **kw}))
    memory = next(e for e in events if e["kind"] == "memory")
    model = build_model(cfg, seed=0)
    n = sum(p.numel() for p in model.parameters())
    weights = 4 * n  # fp32 weights; fp32 gradients the same, two fp32 moments twice that
    measured = memory["tensor_bytes"]
    assert 4 * weights < measured < 4 * weights + weights  # states plus activations of 128 tokens, < the weights
    predicted = _predict(spec.platform.hardware, loop, cfg).peak_bytes
    assert predicted == pytest.approx(measured, rel=0.10), (predicted, measured)


def test_the_calibrated_dispatch_figure_moves_the_prediction(candidate) -> None:
    spec, cfg, loop = candidate
    hw = spec.platform.hardware
    base = _predict(hw, loop, cfg).step_time_s
    slow = _predict(hw.model_copy(update={"kernel_launch_us": 2 * hw.kernel_launch_us}), loop, cfg).step_time_s
    profile = CalibratedProfile(
        platform="cpu",
        backend="gloo",
        workers=2,
        created="2026-01-01T00:00:00Z",
        datasheet=hw,
        gemm=[],
        hbm_bandwidth_gbps=20.0,
        collectives=[],
        collective_latency_us=0.0,
        kernel_launch_us=2 * hw.kernel_launch_us,
    )
    calibrated = _predict(hw, loop, cfg, profile)
    assert slow > 1.3 * base  # on the CPU the tiny model's step is mostly per-op host time
    assert calibrated.source.startswith("calibrated") and calibrated.step_time_s > slow  # slower memory too
