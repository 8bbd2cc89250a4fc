"""The cost model's prediction of step 5's own candidate (`predict_trial`) against quantities that need no
clock: the training memory counted from the tensors, and the host-dispatch figure a profile carries.
(Times are checked by `make bench`, `bench_trial.cost_check`, never here.)"""

from __future__ import annotations

import pytest
import torch

from day0.model.source import resolve_model_source
from day0.planner.profile import CalibratedProfile
from day0.spec.pipeline import load_spec
from day0.steps.trial.loop import run_steps
from day0.steps.trial.model import build_trial_model, scale_config
from day0.steps.trial.run import PlannerMemoryEstimate
from day0.steps.trial.train import TrialPlan, candidate_loop
from tests.fixtures.paths import DATA

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
    model = build_trial_model(cfg, seed=0)
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


def test_eager_traffic_counted_per_layer_kind_matches_the_whole_model(candidate) -> None:
    """The count keeps the first layer of each kind and scales by the kinds' counts: on the 3-layer
    candidate (1 dense, 2 MoE) it matches a count over the whole model within routing's spread, and it
    is many times the fused kernels' accounting step 3 plans with."""
    from day0.core.scopes import module_scopes
    from day0.core.training import forward_loss
    from day0.steps.trial.traffic import _ByteCounter, eager_traffic_bytes

    _, cfg, loop = candidate
    kinds = ["mla+dense", "mla+moe", "mla+moe"]
    counted = eager_traffic_bytes(cfg, kinds, loop.micro_batch, loop.seq_len, "bf16")
    model = build_trial_model(cfg, seed=0).train()
    ids = torch.randint(0, 512, (loop.micro_batch, loop.seq_len + 1), generator=torch.Generator().manual_seed(0))
    forward_loss(model, ids, torch.bfloat16).backward()
    whole = _ByteCounter()
    with module_scopes(model, whole, list(enumerate(kinds))), whole:
        forward_loss(model, ids, torch.bfloat16).backward()
    assert counted == pytest.approx(sum(whole.bytes.values()), rel=0.03)
    assert whole.bytes["layers.1 (mla+moe)"] > whole.bytes["layers.0 (mla+dense)"]  # routing, experts
    twice = eager_traffic_bytes(cfg, kinds, 2 * loop.micro_batch, loop.seq_len, "bf16")
    assert 1.3 * counted < twice < 2 * counted  # activations double; the weights' casts and gradients do not


def test_eager_traffic_and_ddp_buckets_add_to_the_prediction(candidate) -> None:
    from transformers import AutoConfig

    from day0.model.build import build_meta_model
    from day0.model.structure import analyze_structure
    from day0.planner.trial_estimate import ddp_bucket_seconds, eager_seconds, predict_trial

    spec, cfg, loop = candidate
    hw = spec.platform.hardware
    structure = analyze_structure(build_meta_model(AutoConfig.for_model(**cfg), "trial", "fp32"), "trial")
    args = dict(seq_len=loop.seq_len, micro_batch=loop.micro_batch, compute_dtype="bf16")
    from day0.planner.inputs import PlannerOptions

    fused = predict_trial(structure, hw, workers=1, **args).step_time_s
    eager = [predict_trial(structure, hw, workers=1, eager_bytes=b, **args).step_time_s for b in (1e9, 2e9)]
    assert fused < eager[0] < eager[1]
    assert eager[1] - eager[0] == pytest.approx(1e9 / (PlannerOptions().hbm_bandwidth_gbps * 1e9))  # at the bandwidth
    assert eager_seconds(1e6, 2e6, 1e9) == 0.0
    ddp = predict_trial(structure, hw, workers=2, **args).step_time_s
    fsdp = predict_trial(structure, hw, workers=2, zero_stage=3, **args).step_time_s
    assert ddp_bucket_seconds(1e9, 1e10) == pytest.approx(0.6) and ddp != fsdp


def test_the_default_spec_calibrates_before_step_3_so_its_cost_check_is_calibrated(
    candidate, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make run`'s spec has step 3 calibrate the platform first (the calibration job stubbed here: it
    writes a profile to the run's store, as `day0 calibrate` does; tests/integration/test_adapt_flow.py
    runs the real one), and step 5's prediction then comes from that profile, labelled calibrated, not
    from the datasheet.
    (How close it comes to the measurement is `make bench`'s figure, bench_trial's cost_check.)"""
    import day0.steps.parallel.run as step3
    from day0.calibration.job import CalibrationRequest
    from day0.model.structure import ModelStructure
    from day0.planner.profile import load_profile, profile_key
    from day0.runs.context import RunContext
    from day0.steps.trial.cost_check import CostCheck
    from day0.store import open_store

    spec, cfg, loop = candidate
    assert spec.planner.calibrate and spec.planner.profile != "datasheet"
    spec = spec.model_copy(update={"storage": f"file://{tmp_path}"})
    calibrated: list[CalibrationRequest] = []

    class Backend:
        kind = "local"

        def run(self, name, job, request, progress):
            calibrated.append(request)
            profile = CalibratedProfile(
                platform=request.platform.name,
                backend="gloo",
                workers=request.workers,
                created="2026-01-01T00:00:00Z",
                datasheet=request.platform.hardware,
                gemm=[],
                hbm_bandwidth_gbps=20.0,
                collectives=[],
                collective_latency_us=0.0,
                kernel_launch_us=8.0,
            )
            open_store(request.store).put_json(profile_key(request.platform.name), profile.model_dump(mode="json"))
            return job.result_type.model_construct(seconds=1.0, store_key=profile_key("cpu")), None

    class Analyzed:
        structure = ModelStructure.model_validate_json((DATA / "planner/tiny-deepseek-v3.structure.json").read_text())

    ctx = RunContext.create(spec)
    ctx.use_backend(Backend())
    step3.calibrate(ctx, lambda _msg: None)  # the sub-step the flow runs before step 3 (`SUBSTEPS`)
    plans = step3.run(ctx, lambda _msg: None, Analyzed())  # type: ignore[arg-type]
    assert [(r.workers, r.store) for r in calibrated] == [(spec.trial.workers, spec.storage)]
    assert any("calibrated profile" in note for note in plans.notes + plans.cluster.notes)
    profile = load_profile(ctx.store, spec.platform.name)
    predicted = _predict(spec.platform.hardware, loop, cfg, profile, workers=spec.trial.workers)
    check = CostCheck(
        source=predicted.source,
        predicted_step_s=predicted.step_time_s,
        measured_step_s=predicted.step_time_s,
        predicted_peak_bytes=predicted.peak_bytes,
    )
    assert check.calibrated and "datasheet" not in check.describe()["step time"] and check.reason() is None
