"""The planner against published training setups (reference numbers in tests/data/planner/published.yaml)."""

from __future__ import annotations

import pytest
import yaml

from day0.model.structure import ModelStructure
from day0.paths import CONFIGS_DIR
from day0.planner import PlannerOptions, PlanningProblem, cluster_figures, plan_parallelism
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import TrainingSpec, load_yaml
from day0.steps.parallel.config import ParallelConstraints
from tests.fixtures import paths

DATA = paths.DATA / "planner"
REF = yaml.safe_load((DATA / "published.yaml").read_text())


def structure(name: str) -> ModelStructure:
    return ModelStructure.model_validate_json((DATA / f"{name}.structure.json").read_text())


def hardware(platform: str):
    return PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / f"{platform}.yaml")).hardware


@pytest.fixture(scope="module")
def deepseek_report():
    ref = REF["deepseek_v3"]
    cluster = cluster_figures(hardware(ref["platform"]), ref["accelerators"], ref["per_node"])
    training = TrainingSpec(seq_len=ref["seq_len"], global_batch=ref["global_batch"])
    return ref, cluster, training, plan_parallelism(PlanningProblem.of(structure("deepseek-v3"), cluster, training))


def test_deepseek_v3_published_setup_fits_80gb(deepseek_report) -> None:
    ref, cluster, training, _ = deepseek_report
    report = plan_parallelism(
        PlanningProblem.of(
            structure("deepseek-v3"),
            cluster,
            training,
            ParallelConstraints(**ref["parallel"]),
            PlannerOptions(zero_stages=[ref["zero_stage"]]),
        )
    )
    assert report.feasible, report.message
    best = report.best
    assert (best.parallel.tensor_parallel, best.parallel.pipeline_parallel, best.parallel.expert_parallel) == (
        1,
        16,
        64,
    )
    assert best.parallel.data_parallel == 128 and best.memory_knobs.zero_stage == 1
    assert best.memory.total_bytes <= 80 * 1024**3


def test_deepseek_v3_top_plans_feasible_and_ranked(deepseek_report) -> None:
    *_, report = deepseek_report
    assert report.feasible and len(report.plans) >= 5
    steps = [p.time.step_s for p in report.plans]
    assert steps == sorted(steps)
    for p in report.plans[:10]:
        assert p.feasible and p.memory.total_bytes <= p.memory.capacity_bytes
        assert p.parallel.tensor_parallel <= 8
        assert 256 % p.parallel.expert_parallel == 0
        d = p.parallel
        assert d.tensor_parallel * d.pipeline_parallel * d.context_parallel * d.data_parallel == 2048


@pytest.mark.parametrize("setup", REF["llama_3_405b"]["setups"], ids=lambda s: str(s["accelerators"]))
def test_llama_405b_tp8_pp16_feasible_and_tp_within_node(setup: dict) -> None:
    ref = REF["llama_3_405b"]
    cluster = cluster_figures(hardware(ref["platform"]), setup["accelerators"], 8)
    training = TrainingSpec(seq_len=ref["seq_len"], global_batch=ref["global_batch"])
    fixed = plan_parallelism(
        PlanningProblem.of(
            structure("llama-3.1-405b"),
            cluster,
            training,
            ParallelConstraints(
                tensor_parallel=setup["tensor_parallel"],
                pipeline_parallel=setup["pipeline_parallel"],
                context_parallel=1,
            ),
        )
    )
    assert fixed.feasible, fixed.message
    assert fixed.best.parallel.data_parallel == setup["data_parallel"]
    free = plan_parallelism(PlanningProblem.of(structure("llama-3.1-405b"), cluster, training))
    assert free.feasible
    assert all(p.parallel.tensor_parallel <= cluster.per_node for p in free.plans)
    assert 0.2 < free.best.time.mfu < 0.6  # published: 38-43% BF16 MFU


def test_tp_beyond_a_node_is_rejected_with_a_reason() -> None:
    cluster = cluster_figures(hardware("h100"), 8192, 8)
    report = plan_parallelism(
        PlanningProblem.of(
            structure("llama-3.1-405b"),
            cluster,
            TrainingSpec(seq_len=8192, global_batch=2048),
            ParallelConstraints(tensor_parallel=16),
        ),
        find_min_accelerators=False,
    )
    assert not report.feasible
    assert any("exceeds one node" in i.reason for i in report.infeasible)


def test_deepseek_v3_on_8_gpus_is_infeasible_with_minimum_count() -> None:
    cluster = cluster_figures(hardware("h800"), 8, 8)
    report = plan_parallelism(
        PlanningProblem.of(structure("deepseek-v3"), cluster, TrainingSpec(seq_len=4096, global_batch=1536))
    )
    assert not report.feasible and report.plans == []
    # model states alone: 671e9 params x 18 bytes / (80 GiB x 0.95 - 1 GiB) -> at least 150 accelerators
    assert "needs at least 150 accelerators of 80 GiB" in report.message
    assert report.min_accelerators is not None and report.min_accelerators >= 150
    assert report.closest_infeasible and not report.closest_infeasible[0].feasible
    assert "GiB per accelerator" in report.closest_infeasible[0].reason
    assert "feasible: false" in report.to_yaml()
    n, training = report.min_accelerators, TrainingSpec(seq_len=4096, global_batch=1536)
    assert f"smallest whole-node count with a feasible plan is {n}" in report.message
    assert plan_parallelism(
        PlanningProblem.of(structure("deepseek-v3"), cluster_figures(hardware("h800"), n, 8), training)
    ).feasible
    assert not plan_parallelism(
        PlanningProblem.of(structure("deepseek-v3"), cluster_figures(hardware("h800"), n - 8, 8), training),
        find_min_accelerators=False,
    ).feasible
