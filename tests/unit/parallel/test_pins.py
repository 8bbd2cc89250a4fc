"""Pinned knobs (issue 25): `parallel:` (and a written `training.micro_batch`) fix a knob, the search and
step 4 keep it, a fully pinned spec is evaluated as it stands or says which term does not fit and by
how much, and Megatron's recompute methods reach the cost model."""

from __future__ import annotations

import re
from functools import cache

import pytest

from day0.model.structure import ModelStructure
from day0.planner.evaluate import PlanContext
from day0.planner.inputs import GIB
from day0.planner.problem import PlanningProblem
from day0.planner.values import Degrees, MemoryKnobs
from day0.spec.pipeline import PipelineSpec, load_yaml, spec_from_dict
from day0.steps.optimize.plan import optimize_for_spec
from day0.steps.parallel.config import SOFTWARE_PROFILES
from day0.steps.parallel.plan import plan_for_spec, planner_inputs
from tests.fixtures import paths

DATA = paths.DATA / "planner"
ELASTIC = DATA / "qwen3-30b-a3b-64-h100-elastic.yaml"

# Every degree and knob of one Qwen3-30B-A3B plan on the 64 H100 (the elastic pool at its maximum).
FULL_PINS = {
    "tensor_parallel": 1,
    "pipeline_parallel": 4,
    "virtual_pipeline_stages": 3,
    "expert_parallel": 8,
    "expert_tensor_parallel": 1,
    "context_parallel": 1,
    "data_parallel": 16,
    "micro_batch": 1,
    "recompute": "selective",
    "zero_stage": 2,
    "offload": "none",
    "sequence_parallel": True,
    "dualpipe": False,
    "overlap": {"tp": False, "ep": True, "dp": True},
    "grad_reduce_dtype": "bf16",
}


@cache
def qwen() -> ModelStructure:
    return ModelStructure.model_validate_json((DATA / "qwen3-30b-a3b.structure.json").read_text())


def spec(parallel: object = "auto", **training: object) -> PipelineSpec:
    raw = load_yaml(ELASTIC)
    raw["parallel"] = parallel
    raw["training"] = {**raw["training"], **training}
    return spec_from_dict(raw)


def test_a_written_micro_batch_is_honoured_and_a_better_one_is_named() -> None:
    report = plan_for_spec(spec(), qwen())
    assert report.plans and {p.parallel.micro_batch for p in report.plans} == {1}
    assert report.options.pinned["micro_batch"] == "training.micro_batch"
    free = plan_for_spec(_unwritten_micro_batch(), qwen())
    assert {p.parallel.micro_batch for p in free.plans} != {1}  # searched, the search does pick others
    lines = [a for a in report.advice if a.startswith("micro-batch ")]
    best = report.best
    assert best is not None
    for line in lines:  # each claim is the cost model's own figure for those degrees at that micro-batch
        mb, step = int(line.split()[1]), float(re.search(r"take ([\d.]+) s", line).group(1))
        d = best.parallel
        other = Degrees(**{**_dump(d), "micro_batch": mb, "num_microbatches": 512 // (d.data_parallel * mb)})
        options = report.options.model_copy(update={"micro_batches": [mb]})
        ctx = PlanContext(PlanningProblem.of(qwen(), report.cluster, report.training, options=options), other)
        steps = [
            ctx.step_seconds(MemoryKnobs(rc, z, off))
            for rc in options.recompute
            for z in options.zero_stages
            for off in options.offload
            if ctx.fits(MemoryKnobs(rc, z, off))
        ]
        assert step == pytest.approx(min(steps), abs=5e-4) and step < best.time.step_s
        assert "pinned by training.micro_batch" in line


def _unwritten_micro_batch() -> PipelineSpec:
    raw = load_yaml(ELASTIC)
    raw["training"].pop("micro_batch")
    return spec_from_dict(raw)


def _dump(d: Degrees) -> dict:
    return {k: getattr(d, k) for k in d.__dataclass_fields__}


def test_a_fully_pinned_spec_is_evaluated_exactly_and_step4_keeps_every_pin() -> None:
    s = spec(parallel=FULL_PINS)
    report = plan_for_spec(s, qwen())
    assert report.tuples_considered == 1 and len(report.plans) == 1
    p = report.best
    assert p is not None
    for name in (
        "tensor_parallel",
        "pipeline_parallel",
        "virtual_pipeline_stages",
        "expert_parallel",
        "expert_tensor_parallel",
        "context_parallel",
        "data_parallel",
        "micro_batch",
    ):
        assert getattr(p.parallel, name) == FULL_PINS[name], name
    assert (p.memory_knobs.recompute, p.memory_knobs.zero_stage, p.memory_knobs.offload) == ("selective", 2, "none")
    opt = optimize_for_spec(s, qwen(), report)
    assert opt.plan is not None and opt.plan.memory_knobs == p.memory_knobs
    assert (opt.comm.tp_overlap, opt.comm.ep_overlap, opt.comm.dp_overlap) == (False, True, True)
    assert opt.comm.grad_reduce_dtype == "bf16" and opt.step_after_s == pytest.approx(p.time.step_s, rel=1e-12)
    pinned = {t.technique: t.reason for t in opt.techniques}
    assert pinned["recompute"] == "pinned by parallel.recompute" and pinned["ep overlap"].startswith("pinned by")
    recompute = next(t for t in opt.techniques if t.technique == "recompute")
    assert {o.value for o in recompute.options} == {"none", "selective", "full"}  # what unpinning would give


def test_unpinning_a_costly_pinned_knob_is_suggested_with_its_figure() -> None:
    pins = {**FULL_PINS, "recompute": "full"}
    report = plan_for_spec(spec(parallel=pins), qwen())
    line = next(a for a in report.advice if a.startswith("unpinning parallel.recompute"))
    assert report.best is not None
    faster = float(re.search(r": ([\d.]+) s per step", line).group(1))
    assert faster < report.best.time.step_s  # none/selective on these degrees beat the pinned full


def test_a_pinned_plan_that_does_not_fit_says_which_term_and_by_how_much() -> None:
    pins = {
        **FULL_PINS,
        "pipeline_parallel": 1,
        "virtual_pipeline_stages": 1,
        "data_parallel": 64,
        "micro_batch": 8,
        "recompute": "none",
        "zero_stage": 0,
    }
    report = plan_for_spec(spec(parallel=pins), qwen())
    assert not report.plans and report.verdict == "fail"
    closest = report.closest_infeasible[0]
    m = closest.memory
    over = float(re.search(r"([\d.]+) GiB over", closest.reason or "").group(1))
    assert over == pytest.approx((m.total_bytes - m.capacity_bytes) / GIB, abs=0.05)
    largest = max(
        ("activations", m.activations_bytes),
        ("optimizer states", m.optimizer_states_bytes),
        ("weights", m.weights_bytes),
        key=lambda t: t[1],
    )
    assert f"largest: {largest[0]} {largest[1] / GIB:.1f}" in (closest.reason or "")
    for knob, field, values in (
        ("recompute", "recompute", ["none", "selective", "full"]),
        ("zero_stage", "zero_stage", [0, 1, 2, 3]),
    ):
        o = report.options
        ctx = PlanContext(PlanningProblem.of(qwen(), report.cluster, report.training, options=o), closest.parallel)
        knobs = closest.memory_knobs
        fits = any(ctx.fits(MemoryKnobs(**{**_knobs(knobs), field: v})) for v in values)
        said = any(a.startswith(f"unpinning parallel.{knob}") and "makes this setup fit" in a for a in report.advice)
        assert said == fits, (knob, report.advice)


def _knobs(k: MemoryKnobs) -> dict:
    return {"recompute": k.recompute, "zero_stage": k.zero_stage, "offload": k.offload}


def test_pinned_degrees_that_admit_no_layout_name_the_numbers() -> None:
    report = plan_for_spec(spec(parallel={**FULL_PINS, "micro_batch": 3}), qwen())
    assert report.tuples_considered == 0
    assert "the global batch 512 is not a multiple of DP 16 x micro-batch 3 = 48" in report.message
    report = plan_for_spec(spec(parallel={**FULL_PINS, "data_parallel": 8}), qwen())
    assert "TP 1 x PP 4 x CP 1 x DP 8 = 32 accelerators, not 64" in report.message


def test_distributed_optimizer_is_zero_1_and_its_absence_excludes_it() -> None:
    _, on = planner_inputs(spec(parallel={"distributed_optimizer": True}))
    _, off = planner_inputs(spec(parallel={"distributed_optimizer": False}))
    assert on.zero_stages == [1] and 1 not in off.zero_stages and off.zero_stages


def test_megatron_recompute_methods_reach_memory_and_time() -> None:
    """block N recomputes N layers per chunk (between none and full); uniform N keeps one input per N layers
    (fewer stored bytes than N = 1, N layers live while recomputing)."""
    base = spec(parallel={**FULL_PINS, "recompute": "full"})
    _, options = planner_inputs(base)
    problem = PlanningProblem.of(qwen(), base_cluster(base), base.training, options=options)
    d = Degrees(1, 4, 1, 8, 1, 1, 16, 1, 32)

    def ctx(**update: object) -> PlanContext:
        return PlanContext(problem.with_options(options.model_copy(update=update)), d)

    k = {rc: MemoryKnobs(rc, 2, "none") for rc in ("none", "full")}
    none, full = ctx().memory(k["none"]), ctx().memory(k["full"])
    block = ctx(recompute_method="block", recompute_num_layers=4)
    bm, bt = block.memory(k["full"]), block.step_seconds(k["full"])
    assert full.activations_bytes < bm.activations_bytes < none.activations_bytes
    assert ctx().step_seconds(k["none"]) < bt < ctx().step_seconds(k["full"])
    uniform = ctx(recompute_num_layers=4).memory(k["full"])
    assert uniform.activations_bytes < full.activations_bytes
    assert uniform.recompute_working_bytes == pytest.approx(4 * full.recompute_working_bytes)


def base_cluster(s: PipelineSpec):
    return planner_inputs(s)[0]


def test_bf16_gradients_halve_the_gradient_memory_and_reach_megatron() -> None:
    """`planner.grad_dtype: bf16` (Megatron's --grad-reduce-in-bf16: the main_grad buffer in bf16) halves
    the gradient memory of the same pinned plan, and the plan's Megatron arguments say so."""
    raw = load_yaml(ELASTIC)
    specs = [
        spec_from_dict(
            raw
            | {
                "parallel": {**FULL_PINS, "grad_reduce_dtype": g},
                "planner": {**raw.get("planner", {}), "grad_dtype": g},
            }
        )
        for g in ("fp32", "bf16")
    ]
    fp32, bf16 = (plan_for_spec(s, qwen()) for s in specs)
    assert fp32.best is not None and bf16.best is not None
    assert bf16.best.memory.gradients_bytes == pytest.approx(fp32.best.memory.gradients_bytes / 2, rel=1e-12)
    flags = [optimize_for_spec(s, qwen(), r).frameworks for s, r in zip(specs, (fp32, bf16))]
    assert ["--grad-reduce-in-bf16" in (f.megatron if f else []) for f in flags] == [False, True]


def test_a_software_profile_sets_the_figures_the_spec_does_not_write() -> None:
    """Issue 39, item 4: `planner.software` brings its profile's cited figures (torchtitan FSDP2: FA2's 35% of
    peak, no ZeRO-1) where the spec writes none; a figure written in `planner:` wins, a pinned ZeRO stage
    too; without a profile the planner's own figures are Megatron-Core 2025's."""
    raw = load_yaml(ELASTIC)
    planner = raw.get("planner", {})

    def options(extra: dict, parallel: object = "auto"):
        return planner_inputs(spec_from_dict(raw | {"planner": planner | extra, "parallel": parallel}))[1]

    tt, mc = SOFTWARE_PROFILES["torchtitan-fsdp2-2024"], SOFTWARE_PROFILES["megatron-core-2025"]
    o = options({"software": "torchtitan-fsdp2-2024"})
    assert (o.attention_efficiency, o.zero_stages, o.grad_dtype) == (
        tt.attention_efficiency,
        list(tt.zero_stages),
        tt.grad_dtype,
    )
    written = options({"software": "torchtitan-fsdp2-2024", "attention_efficiency": 0.6})
    assert written.attention_efficiency == 0.6
    pinned = options({"software": "torchtitan-fsdp2-2024"}, {"zero_stage": 3})
    assert pinned.zero_stages == [3]
    default = options({})
    assert (default.attention_efficiency, default.zero_stages) == (mc.attention_efficiency, list(mc.zero_stages))
    old = options({"software": "megatron-lm-2021"})
    assert old.flash_attention is False and old.zero_stages == [0]
    for profile in SOFTWARE_PROFILES.values():
        assert set(profile.sources) == {
            "grad_dtype",
            "flash_attention",
            "attention_efficiency",
            "gemm_efficiency",
            "zero_stages",
            "overlaps",
            "dualpipe",
            "devices",
            "moe_grouped_gemm",
            "moe_token_dispatcher",
            "cp_kv_exchange",
        }
    # its GEMM efficiencies, under a dtype the spec writes
    gemm = options({"software": "torchtitan-fsdp2-2024", "gemm_efficiency": {"bf16": 0.7}}).gemm_efficiency
    assert gemm["bf16"] == 0.7 and gemm["fp8"] == tt.gemm_efficiency["fp8"]
    fsdp = options({"software": "fsdp-trainer-2024"})
    assert fsdp.grad_dtype == "bf16" and fsdp.zero_stages == [0, 2, 3] and fsdp.software_overlaps == ["dp"]
    assert old.software_overlaps == ["dp"] and default.software_overlaps == ["tp", "ep", "dp"]
    s = spec_from_dict(raw | {"planner": planner | {"software": "torchtitan-fsdp2-2024"}})
    report = plan_for_spec(s, qwen())
    assert report.band is not None and report.band.software == "torchtitan-fsdp2-2024"
    assert report.best is not None and report.best.memory_knobs.zero_stage in tt.zero_stages
    assert report.best.parallel.expert_parallel > 1


def test_step4_switches_on_only_the_overlaps_the_software_has() -> None:
    """The Qwen3 MoE plan's EP all-to-all overlap pays and step 4 takes it under Megatron-Core; torchtitan's
    2024 profile has no such overlap, so step 4 keeps it off and says why."""
    raw = load_yaml(ELASTIC)
    planner = raw.get("planner", {})
    chosen = {}
    for software in ("megatron-core-2025", "torchtitan-fsdp2-2024"):
        s = spec_from_dict(raw | {"planner": planner | {"software": software}})
        chosen[software] = optimize_for_spec(s, qwen(), plan_for_spec(s, qwen()))
    assert chosen["megatron-core-2025"].comm.ep_overlap is True
    tt = chosen["torchtitan-fsdp2-2024"]
    assert tt.comm.ep_overlap is False
    ep = next(t for t in tt.techniques if t.technique == "ep overlap")
    assert "planner.software" in ep.reason
