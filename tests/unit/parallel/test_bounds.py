"""The cost model is written once: the static bound and the evaluation call the same term functions,
so over a sweep of models, degrees, precisions and comm settings the bound never exceeds the evaluated
step time, and changing a term moves both. MFU is against the peak of the dtype the GEMMs use."""

from __future__ import annotations

import random

import pytest

from day0.model.structure import ModelStructure
from day0.paths import CONFIGS_DIR
from day0.planner import PlannerOptions, cluster_figures
from day0.planner import step_time as st
from day0.planner.bounds import StaticBound
from day0.planner.evaluate import PlanContext
from day0.planner.inputs import CommSettings
from day0.planner.problem import PlanningProblem
from day0.planner.space import enumerate_degrees, knob_settings
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import Precision, TrainingSpec, load_yaml
from day0.steps.parallel.config import ParallelConstraints
from tests.fixtures import paths

DATA = paths.DATA / "planner"
H100 = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "h100.yaml")).hardware

COMMS = [
    CommSettings(),
    CommSettings(tp_overlap=True, ep_overlap=True, dp_overlap=False),
    CommSettings(tp_overlap=True, dispatch_dtype="fp8", grad_reduce_dtype="bf16"),
    CommSettings(ep_overlap=True, dp_overlap=True),
]
SWEEP = [  # model, accelerators, seq, global batch, compute dtype, options
    ("deepseek-v3", 512, 4096, 1024, "bf16", {}),
    ("deepseek-v3", 256, 4096, 512, "fp8", {"recompute": ["selective", "full"], "offload": ["optimizer"]}),
    ("qwen3-30b-a3b", 64, 4096, 256, "bf16", {"flash_attention": False, "zero_stages": [2, 3]}),
    ("llama-3-8b", 16, 8192, 64, "fp8", {"grad_dtype": "bf16"}),
    # host dispatch and an overlapped collective both above the device time: more recompute shortens the slot
    ("tiny-deepseek-v3", 64, 512, 64, "bf16", {}),
]


def _structure(name: str) -> ModelStructure:
    return ModelStructure.model_validate_json((DATA / f"{name}.structure.json").read_text())


def _sample(model: str, n: int, seq: int, gb: int, compute: str, extra: dict, comm: CommSettings, k: int = 12):
    cluster = cluster_figures(H100, n, 8)
    training = TrainingSpec(seq_len=seq, global_batch=gb, precision=Precision(compute=compute, master_weights="fp32"))
    problem = PlanningProblem.of(_structure(model), cluster, training, options=PlannerOptions(comm=comm, **extra))
    degrees = list(enumerate_degrees(problem.costs, cluster, training, ParallelConstraints(), problem.options))
    assert degrees, f"{model} on {n} accelerators: no degrees to sample"
    return problem, random.Random(0).sample(degrees, min(k, len(degrees)))


@pytest.mark.parametrize("comm", COMMS, ids=["default", "tp+ep overlap", "fp8 dispatch", "ep+dp overlap"])
@pytest.mark.parametrize("case", SWEEP, ids=[f"{c[0]}-{c[4]}" for c in SWEEP])
def test_bound_never_exceeds_the_evaluated_step(case: tuple, comm: CommSettings) -> None:
    problem, degrees = _sample(*case, comm=comm)
    options, bound = problem.options, StaticBound(problem)
    for d in degrees:
        ctx = PlanContext(problem, d)
        times = [ctx.time(k) for k in knob_settings(options)]
        assert bound(d) <= ctx.time_lower_bound() <= min(t.step_s for t in times), d
        assert all(0 < t.mfu <= options.gemm_fraction(case[4]) for t in times), d  # never above 100%


@pytest.mark.parametrize("comm", COMMS[:3], ids=["default", "tp+ep overlap", "fp8 dispatch"])
@pytest.mark.parametrize("case", SWEEP, ids=[f"{c[0]}-{c[4]}" for c in SWEEP])
def test_the_dominated_zero_stages_never_hold_the_least_sync(case: tuple, comm: CommSettings) -> None:
    """The bound leaves out ZeRO stages another allowed stage beats (`least_zero_stages`): taking every
    allowed stage gives the very same bound."""
    problem, degrees = _sample(*case, comm=comm)
    pruned, every = StaticBound(problem), StaticBound(problem)
    every.zero_stages = sorted(problem.options.zero_stages)
    assert len(pruned.zero_stages) < len(every.zero_stages)
    assert [pruned(d) for d in degrees] == [every(d) for d in degrees]


@pytest.mark.parametrize(("term", "factor"), [("optimizer_seconds_per_param", 50.0), ("dp_sync_seconds", 50.0)])
def test_a_changed_term_moves_the_bound_and_the_evaluation(
    monkeypatch: pytest.MonkeyPatch, term: str, factor: float
) -> None:
    problem, degrees = _sample("deepseek-v3", 512, 4096, 1024, "bf16", {}, CommSettings(dp_overlap=False), k=6)
    knobs = knob_settings(problem.options)

    def measure() -> list[tuple[float, float]]:
        bound = StaticBound(problem)
        return [(bound(d), min(PlanContext(problem, d).time(k).step_s for k in knobs)) for d in degrees]

    before = measure()
    original = getattr(st, term)
    monkeypatch.setattr(st, term, lambda *a, **kw: factor * original(*a, **kw))
    after = measure()
    for (b0, e0), (b1, e1) in zip(before, after):
        assert b1 > b0 and e1 > e0  # one definition: both saw the change
        assert b1 <= e1  # and the bound is still a bound


def test_stage_term_is_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second more per stage slot adds (m + (p-1)/v) seconds to the pipeline, evaluated and bounded alike
    (DP not overlapped, so no exposed communication absorbs it)."""
    problem, degrees = _sample("qwen3-30b-a3b", 64, 4096, 256, "bf16", {}, CommSettings(dp_overlap=False), k=4)
    original = st.stage_seconds

    def slower(*a, **kw):
        t = original(*a, **kw)
        return st.StageTime(t.compute_s, t.recompute_s, t.tp_comm_s, t.ep_comm_s, t.cp_comm_s, t.slot_s + 1.0)

    k = knob_settings(problem.options)[0]
    base = [(StaticBound(problem)(d), PlanContext(problem, d).time(k).step_s) for d in degrees]
    monkeypatch.setattr(st, "stage_seconds", slower)
    for d, (b0, e0) in zip(degrees, base):
        b1 = StaticBound(problem)(d)
        e1 = PlanContext(problem, d).time(k).step_s
        slots = d.num_microbatches + (d.pipeline_parallel - 1) / d.virtual_pipeline_stages
        assert b1 - b0 == pytest.approx(slots, rel=1e-6) and e1 - e0 == pytest.approx(slots, rel=1e-6)
        assert b1 <= e1


def test_fp8_mfu_is_against_the_fp8_peak() -> None:
    problem, degrees = _sample("llama-3-8b", 16, 8192, 64, "fp8", {}, CommSettings(), k=1)
    ctx, training = PlanContext(problem, degrees[0]), problem.training
    t = ctx.time(knob_settings(problem.options)[0])
    flops = st.model_flops_per_step(problem.costs, training.global_batch, training.seq_len)
    assert t.mfu == pytest.approx(flops / (t.step_s * degrees[0].accelerators * H100.fp8_tflops * 1e12))
    assert st.gemm_peak_flops(H100, "bf16") == H100.bf16_tflops * 1e12
