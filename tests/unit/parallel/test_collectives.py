"""Collective bandwidth on multi-NIC nodes (issue 39, item 3) against published nccl-tests bus bandwidths,
and the data-parallel rings of a plan priced over the NICs their ranks share a node with."""

from __future__ import annotations

import pytest

from day0.planner import timing as tm
from day0.planner.inputs import PlannerOptions, cluster_figures, costs_for
from day0.planner.rates import RateCache
from day0.planner.values import Degrees
from day0.spec.cluster import HardwareSpec
from tests.fixtures.published import structure

# (what was measured, ranks, GPUs per node, per-GPU NVLink GB/s, per-GPU NIC GB/s, measured busbw GB/s)
# Per-GPU NIC: the node's NIC total over its GPUs. Ring all-reduce at large sizes (NCCL_ALGO=RING or 3+ nodes).
NCCL_TESTS = [
    # NVIDIA/nccl#812 (NCCL maintainer, 2023-03-31): "On an Nvidia DGX-A100 system we have 8x200Gbit/s IB cards
    # and we measure 192GB/s AllReduce BusBW" (ring, scale-out beyond 2 nodes).
    ("DGX A100, 8 x HDR 200 Gb/s", 32, 8, 300, 25, 192),
    # NVIDIA/nccl-tests#119: 3 servers of 8 A100 SXM4 40GB with 4 HDR NICs each, "theoretical performance is
    # 100GB/s (200G x 4 / 8) ... peak performance reaches about 96GB/s" (24 ranks, all_reduce_perf).
    ("3 x 8 A100, 4 x HDR 200 Gb/s per node", 24, 8, 300, 12.5, 96),
    # NVIDIA/nccl-tests#290 (NCCL maintainer, 2025-03-03), H100 nodes, two nodes with NCCL_ALGO=RING: "For NDR @
    # 400Gbps you should see 46-48GB/s per NIC" (8 NICs a node: the lower figure).
    ("2 x 8 H100, 8 x NDR 400 Gb/s", 16, 8, 450, 50, 8 * 46),
]


@pytest.mark.parametrize(("what", "ranks", "per_node", "nvlink", "nic", "measured"), NCCL_TESTS, ids=lambda x: x)
def test_ring_bus_bandwidth_is_the_nodes_nics_as_nccl_tests_measure(
    what: str, ranks: int, per_node: int, nvlink: float, nic: float, measured: float
) -> None:
    """The model's link figure is the ceiling NCCL reaches within 2-8% over the NICs (the 0.8
    `collective_efficiency` the cost model applies on top is NVLink's, NVIDIA/nccl#1455: ring busbw 365-370
    of 450 GB/s on 8 H100); one NIC per GPU, the figure before item 3, is 8x below what is measured."""
    model = tm.ring_bandwidth(ranks, 1, per_node, nvlink, nic) / 1e9
    assert 0.9 <= measured / model <= 1.0, (what, model, measured)
    one_nic = tm.link_bandwidth(ranks, per_node, nvlink, nic) / 1e9
    assert measured / one_nic >= 3.5, (what, one_nic)


def test_ranks_per_node_set_the_nics_a_ring_uses() -> None:
    """Stride 1, 2, 4, 8 on 8-GPU nodes: 8, 4, 2, 1 ranks of the group per node, as many NICs, never above
    NVLink; a group inside one node runs on NVLink alone."""
    figures = [tm.ring_bandwidth(64, stride, 8, 450, 50) / 1e9 for stride in (1, 2, 4, 8)]
    assert figures == [400, 200, 100, 50]
    assert tm.ring_bandwidth(4, 2, 8, 450, 50) / 1e9 == 450
    assert tm.ring_bandwidth(64, 1, 8, 160, 50) / 1e9 == 160  # H800: NVLink below 8 NICs


def test_all_to_all_leaves_each_node_over_its_ranks_nics() -> None:
    """A dispatch over 16 ranks, 8 per node: the node's off-node bytes (8 ranks x half their copies) leave
    over 8 NICs, one NIC's worth per rank; with 1 rank per node, the same per rank."""
    tokens, k, width = 4096, 8, 7168 * 2
    t = tm.expert_alltoall_seconds(tokens, k, width, 16, 1, 8, 1e6, 50, None)
    node_off_bytes = 8 * tokens * width * k * 8 / 16
    assert t == pytest.approx(node_off_bytes / (8 * 50e9))
    spread = tm.expert_alltoall_seconds(tokens, k, width, 16, 8, 8, 1e6, 50, None)
    assert spread == pytest.approx(tokens * width * k * 15 / 16 / 50e9)


def test_data_parallel_rings_of_a_plan_use_the_nics_of_their_node() -> None:
    """TP1 and TP8 layouts of the same model on 64 GPUs: the dense DP ring of TP1 has 8 ranks a node (8
    NICs), TP8's one; the routed experts' ring of EP8 (expert replicas 8 apart) one a node."""
    hw = HardwareSpec(memory_gib=80, bf16_tflops=989, intra_node_bandwidth_gbps=450, inter_node_bandwidth_gbps=50)
    o = PlannerOptions()
    cache = RateCache(costs_for(structure("mixtral-8x7b"), o, "bf16"), cluster_figures(hw, 64, 8), 4096, "bf16", o)
    coll = o.collective_efficiency

    def degrees(tp: int, dp: int) -> Degrees:
        return Degrees(
            tensor_parallel=tp,
            pipeline_parallel=1,
            virtual_pipeline_stages=1,
            expert_parallel=8,
            expert_tensor_parallel=1,
            context_parallel=1,
            data_parallel=dp,
            micro_batch=1,
            num_microbatches=4,
        )

    tp1, tp8 = cache.rates(degrees(1, 64)), cache.rates(degrees(8, 8))
    assert tp1.dp_bandwidth == pytest.approx(8 * 50 * coll * 1e9)
    assert tp8.dp_bandwidth == pytest.approx(50 * coll * 1e9)
    assert tp1.expert_dp_bandwidth == pytest.approx(50 * coll * 1e9)
