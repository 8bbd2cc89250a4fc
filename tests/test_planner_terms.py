"""The cost-model terms added for the published runs, each against its formula."""

from __future__ import annotations

from pathlib import Path

import pytest

from day0.analysis.structure import ModelStructure
from day0.planner import timing as tm
from day0.planner.inputs import PlannerOptions, costs_for
from day0.planner.memory import dualpipe_weight_bytes, zero3_unit_params
from day0.planner.model import is_gated

DATA = Path(__file__).parent / "data" / "planner"


def _structure(name: str) -> ModelStructure:
    path = DATA / "published" / f"{name}.structure.json"
    return ModelStructure.model_validate_json((path if path.exists() else DATA / f"{name}.structure.json").read_text())


def test_gemm_roofline_rises_with_size_to_the_dtype_roof() -> None:
    peak, hbm = 989e12, 3.0e12
    eff = [tm.gemm_efficiency([(n, n, n)], 2, peak, 0.8, hbm) for n in (256, 1024, 4096, 16384)]
    assert eff == sorted(eff) and 0.75 < eff[-1] < 0.8 and eff[0] < 0.5  # the roof is approached, never passed
    thin = tm.gemm_efficiency([(64, 7168, 2048)], 2, peak, 0.8, hbm)  # few tokens per expert
    assert thin < 0.3 * 0.8 + 0.1
    fp8 = tm.gemm_efficiency([(8192, 8192, 8192)], 1, 2 * peak, 0.65, hbm)
    assert 0.55 < fp8 < 0.65  # fp8 has its own roof (and halves the bytes), not twice bf16's throughput


def test_node_limited_routing_caps_the_nic_traffic() -> None:
    # EP64 over 8 nodes, top-8: unlimited, 7/8 of the 8 copies cross the NIC; at most 4 nodes: 4 x 7/8
    free = tm.expert_alltoall_seconds(4096, 8, 7168, 64, 1, 8, 160, 50, None)
    capped = tm.expert_alltoall_seconds(4096, 8, 7168, 64, 1, 8, 160, 50, 4)
    assert free == pytest.approx(4096 * 7168 * 8 * 56 / 64 / 50e9)
    assert capped == pytest.approx(4096 * 7168 * 4 * 7 / 8 / 50e9)
    assert tm.expert_alltoall_seconds(4096, 8, 7168, 8, 1, 8, 160, 50, 4) == pytest.approx(
        4096 * 7168 * 8 * 7 / 8 / 160e9
    )  # one node: NVLink only


def test_dualpipe_halves_the_bubble_and_keeps_two_weight_copies() -> None:
    assert tm.pipeline_seconds(32, 16, 1, 1.0) == (32 + 15, 15)
    assert tm.pipeline_seconds(32, 16, 1, 1.0, dualpipe=True) == (32 + 7, 7)
    assert dualpipe_weight_bytes(10.0, True) == 10.0 and dualpipe_weight_bytes(10.0, False) == 0.0


def test_overlap_costs_the_sms_it_takes() -> None:
    assert tm.exposed(1.0, 2.0, overlap=True, sm_fraction=0.15) == pytest.approx(0.15)
    assert tm.exposed(3.0, 2.0, overlap=True, sm_fraction=0.15) == pytest.approx(1.45)
    assert tm.exposed(3.0, 2.0, overlap=False, sm_fraction=0.15) == 3.0


def test_zero3_gathers_the_largest_unit_of_an_moe_layer() -> None:
    assert zero3_unit_params(100.0, 1.0, 0.0) == 101.0
    assert zero3_unit_params(100.0, 1.0, 500.0) == 500.0  # local experts gathered apart from attention


def test_gated_and_plain_mlps_are_told_apart() -> None:
    assert not is_gated(_structure("gpt-175b")) and is_gated(_structure("llama-3.1-405b"))
    assert is_gated(_structure("deepseek-v3"))


def test_fp8_adds_cast_traffic_and_mtp_adds_a_layer_and_a_head() -> None:
    s, o = _structure("deepseek-v3"), PlannerOptions()
    bf16, fp8 = costs_for(s, o, "bf16"), costs_for(s, o, "fp8")
    assert all(b.memory_bound_bytes < f.memory_bound_bytes for b, f in zip(bf16.kinds, fp8.kinds))
    mtp = costs_for(s, o.model_copy(update={"mtp_layers": 1}), "bf16")
    assert mtp.num_layers == bf16.num_layers + 1 and mtp.head_flops_per_token == 2 * bf16.head_flops_per_token
