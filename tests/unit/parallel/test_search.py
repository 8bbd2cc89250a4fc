"""The search: pruned result == brute force, constraints hold, bounds are bounds, step 4 and YAML shape."""

from __future__ import annotations

import random

import pytest
import yaml

from day0.model.structure import ModelStructure
from day0.paths import CONFIGS_DIR
from day0.planner import (
    PlannerOptions,
    PlanningProblem,
    brute_force,
    cluster_figures,
    cluster_from_spec,
    plan_parallelism,
)
from day0.planner.bounds import static_lower_bound
from day0.planner.evaluate import PlanContext
from day0.planner.model import model_costs
from day0.planner.space import enumerate_degrees, knob_settings
from day0.planner.stages import partition, rank_groups
from day0.planner.values import OFFLOADS, RECOMPUTES
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import TrainingSpec, load_spec, load_yaml
from day0.steps.optimize.techniques import choose_optimizations
from day0.steps.parallel.config import ParallelConstraints
from day0.steps.parallel.result import PlanReport
from tests.fixtures import paths

DATA = paths.DATA / "planner"
H100 = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "h100.yaml")).hardware


def structure(name: str) -> ModelStructure:
    return ModelStructure.model_validate_json((DATA / f"{name}.structure.json").read_text())


CASES = [("llama-3-8b", 16, 64, 8192), ("tiny-deepseek-v3", 8, 16, 128), ("qwen3-30b-a3b", 16, 64, 4096)]


@pytest.mark.parametrize(("model", "n", "gb", "seq"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("keep", [1, 5])
def test_pruned_search_equals_brute_force(model: str, n: int, gb: int, seq: int, keep: int) -> None:
    s, cluster = structure(model), cluster_figures(H100, n, 8)
    training, options = TrainingSpec(seq_len=seq, global_batch=gb), PlannerOptions(keep_plans=keep)
    smart, brute = (
        plan_parallelism(PlanningProblem.of(s, cluster, training, options=options)),
        brute_force(PlanningProblem.of(s, cluster, training, options=options)),
    )
    assert smart.plans and [p.model_dump() for p in smart.plans] == [p.model_dump() for p in brute.plans]
    assert smart.configurations_evaluated < brute.configurations_evaluated


def test_degree_constraints_hold() -> None:
    s = structure("qwen3-30b-a3b")
    costs, cluster, training = (
        model_costs(s),
        cluster_figures(H100, 64, 8),
        TrainingSpec(seq_len=4096, global_batch=256),
    )
    degrees = list(enumerate_degrees(costs, cluster, training, ParallelConstraints(), PlannerOptions()))
    assert degrees
    for d in degrees:
        tp, pp, cp, dp = d.tensor_parallel, d.pipeline_parallel, d.context_parallel, d.data_parallel
        ep, etp, vpp = d.expert_parallel, d.expert_tensor_parallel, d.virtual_pipeline_stages
        assert tp * pp * cp * dp == 64 == d.accelerators and tp <= 8 and s.num_attention_heads % tp == 0
        assert s.moe.num_experts % ep == 0 and (tp * cp * dp) % (ep * etp) == 0
        assert dp * d.micro_batch * d.num_microbatches == 256 and pp * vpp <= s.num_layers
        assert vpp == 1 or d.num_microbatches % pp == 0


def test_fixed_degrees_are_respected() -> None:
    s, cluster = structure("qwen3-30b-a3b"), cluster_figures(H100, 64, 8)
    report = plan_parallelism(
        PlanningProblem.of(
            s,
            cluster,
            TrainingSpec(seq_len=4096, global_batch=256),
            ParallelConstraints(tensor_parallel=2, expert_parallel=16, max_pipeline_parallel=2),
        )
    )
    assert report.plans
    assert all(
        p.parallel.tensor_parallel == 2 and p.parallel.expert_parallel == 16 and p.parallel.pipeline_parallel <= 2
        for p in report.plans
    )


def test_lower_bounds_never_exceed_the_model() -> None:
    rng = random.Random(0)
    s, cluster = structure("deepseek-v3"), cluster_figures(H100, 512, 8)
    training, options = TrainingSpec(seq_len=4096, global_batch=1024), PlannerOptions()
    problem = PlanningProblem.of(s, cluster, training, options=options)
    degrees = rng.sample(list(enumerate_degrees(problem.costs, cluster, training, ParallelConstraints(), options)), 60)
    for d in degrees:
        ctx = PlanContext(problem, d)
        steps = [ctx.time(k).step_s for k in knob_settings(options)]
        mems = [ctx.memory(k).total_bytes for k in knob_settings(options)]
        assert static_lower_bound(problem, d) <= ctx.time_lower_bound() <= min(steps)
        assert ctx.memory_lower_bound() <= min(mems) * (1 + 1e-12)


def test_stage_partition_balances_flops_and_covers_layers() -> None:
    costs = model_costs(structure("deepseek-v3"))
    for chunks in (1, 2, 16, 32, 61):
        sizes = partition(costs, chunks, 4096)
        assert len(sizes) == chunks and sum(sizes) == 61 and min(sizes) >= 1
    sizes = partition(costs, 16, 4096)
    assert sizes[-1] < max(sizes)  # the output head (2·h·V FLOPs per token) takes a layer's place
    groups, per_rank = rank_groups(costs, 8, 2, 4096)
    assert sum(per_rank) == 61 and len(per_rank) == 8 and len(groups) <= 8


def test_plan_yaml_has_the_pipeline_vocabulary() -> None:
    report = PlanReport.of(
        plan_parallelism(
            PlanningProblem.of(
                structure("llama-3-8b"), cluster_figures(H100, 16, 8), TrainingSpec(seq_len=8192, global_batch=64)
            )
        )
    )
    doc = yaml.safe_load(report.to_yaml())
    assert set(doc["parallel"]) >= {"tensor_parallel", "pipeline_parallel", "expert_parallel", "data_parallel"}
    assert set(doc["memory"]) == {"recompute", "zero_stage", "offload"}
    assert doc["precision"] == {"master_weights": "fp32", "compute": "bf16"}
    files = report.files()
    assert yaml.safe_load(files["plan.yaml"]) == doc and files["memory.png"].startswith(b"\x89PNG")
    md = report.to_markdown()
    assert "| # | TP |" in md and "## Memory of the best plan" in md


def test_memory_breakdown_terms_sum_to_total() -> None:
    report = plan_parallelism(
        PlanningProblem.of(
            structure("deepseek-v3"), cluster_figures(H100, 512, 8), TrainingSpec(seq_len=4096, global_batch=1024)
        )
    )
    for p in report.plans[:5]:
        m = p.memory
        terms = (
            m.weights_bytes
            + m.gradients_bytes
            + m.optimizer_states_bytes
            + m.embedding_head_bytes
            + m.activations_bytes
            + m.recompute_working_bytes
            + m.logits_bytes
            + m.comm_buffers_bytes
            + m.framework_bytes
            + m.fragmentation_reserve_bytes
        )
        assert terms == pytest.approx(m.total_bytes)
        assert m.activations_bytes == pytest.approx(m.activations_per_microbatch_bytes * m.inflight_microbatches)


def test_step4_reports_each_technique_and_never_slows_the_plan() -> None:
    s, cluster = structure("deepseek-v3"), cluster_figures(H100, 512, 8)
    training = TrainingSpec(seq_len=4096, global_batch=1024)
    report = plan_parallelism(PlanningProblem.of(s, cluster, training))
    opt = choose_optimizations(PlanningProblem.of(s, cluster, training), report.best)
    names = {t.technique for t in opt.techniques}
    assert {"recompute", "zero stage", "offload", "dp overlap", "gradient reduce dtype"} <= names
    assert opt.plan.feasible and opt.step_after_s <= opt.step_before_s
    for t in opt.techniques:
        chosen = next(o for o in t.options if o.value == t.chosen)
        assert chosen.memory_saved_bytes == 0 and chosen.time_cost_s == 0
    assert yaml.safe_load(opt.to_yaml())["communication"]["dp_overlap"] is True
    assert opt.comm.dispatch_dtype == "bf16"  # fp8 dispatch only with fp8 training


def test_cluster_from_spec_uses_the_largest_homogeneous_group() -> None:
    spec = load_spec(CONFIGS_DIR / "pipelines" / "deepseek-v3-on-npu.yaml")
    cluster = cluster_from_spec(spec)
    assert cluster.accelerators == 256 * 8 and cluster.hardware.memory_gib == 64 and cluster.pools == ["npu-fixed"]
    assert any("cloud-elastic" in n for n in cluster.notes)
    gpu = load_spec(DATA / "deepseek-v3-2048-h800.yaml")
    assert cluster_from_spec(gpu).accelerators == 2048


@pytest.mark.parametrize(
    "options",
    [PlannerOptions(), PlannerOptions(zero_stages=[3, 1], recompute=["full", "none"], offload=["optimizer", "none"])],
    ids=["default", "unsorted choices"],
)
def test_knob_settings_come_in_rank_order(options: PlannerOptions) -> None:
    """`best_knobs` breaks step-time ties by a setting's index, which is its rank only in this order."""
    knobs = knob_settings(options)
    ranks = [(k.zero_stage, RECOMPUTES.index(k.recompute), OFFLOADS.index(k.offload)) for k in knobs]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
