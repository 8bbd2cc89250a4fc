"""The MoE layer and the context-parallel K/V exchange as recipes run them (issue 39, item 6): the token
dispatcher, grouped GEMMs or one expert at a time, dropless routing's busiest rank, the paired EP overlap, and
PyTorch's all-gathered K/V, each against its formula."""

from __future__ import annotations

import pytest

from day0.planner import timing as tm
from day0.planner.inputs import DROPLESS_EXPERT_LOAD, PlannerOptions, cluster_figures, costs_for
from day0.planner.kernels import SEQUENTIAL_EXPERT_OPS
from day0.planner.rates import RateCache
from day0.planner.space import with_techniques_on
from day0.planner.stages import stage_work
from day0.planner.step_time import StageWork, stage_seconds
from day0.planner.values import Degrees
from day0.spec.cluster import HardwareSpec
from tests.unit.parallel.test_terms import _structure

H100 = HardwareSpec(
    memory_gib=80,
    bf16_tflops=989,
    fp8_tflops=1979,
    intra_node_bandwidth_gbps=450,
    inter_node_bandwidth_gbps=50,
    kernel_launch_us=10,
)


def _degrees(ep: int) -> Degrees:
    """Expert parallelism `ep` and data parallelism 8, nothing else."""
    return Degrees(
        tensor_parallel=1,
        pipeline_parallel=1,
        virtual_pipeline_stages=1,
        expert_parallel=ep,
        expert_tensor_parallel=1,
        context_parallel=1,
        data_parallel=8,
        micro_batch=1,
        num_microbatches=1,
    )


def _rates(ep: int, **options: object):
    """Qwen3-30B-A3B (128 experts, top-8) at 4096 tokens, EP `ep` inside one node of 8."""
    o = PlannerOptions(**options)  # type: ignore[arg-type]
    s = _structure("qwen3-30b-a3b")
    return RateCache(costs_for(s, o, "bf16"), cluster_figures(H100, 8, 8), 4096, "bf16", o).rates(_degrees(ep)), o


def test_the_allgather_dispatcher_moves_group_over_top_k_times_the_all_to_alls_bytes() -> None:
    # 8 ranks in a node, top-2: the all-to-all sends 2 x 7/8 copies of each token, the all-gather brings in all
    # 7 peers' tokens: 7 / 1.75 = 4 = group / top-k
    all_to_all = tm.expert_alltoall_seconds(4096, 2, 8192, 8, 1, 8, 450, 50, None)
    all_gather = tm.allgather_dispatch_seconds(4096, 8192, 8, 1, 8, 450, 50)
    assert all_gather == pytest.approx(4 * all_to_all)
    assert all_gather == pytest.approx(7 * 4096 * 8192 / 450e9)
    assert tm.allgather_dispatch_seconds(4096, 8192, 1, 1, 8, 450, 50) == 0.0  # EP1: nothing to gather
    # the permute reads the gathered buffer and writes its zero-filled output: 2 x 8 ranks' tokens
    assert tm.allgather_permute_bytes(4096, 8192, 8) == 2 * 8 * 4096 * 8192


def test_dropless_routing_slows_the_busiest_ranks_experts_and_what_it_receives() -> None:
    balanced, _ = _rates(8, moe_routing="balanced")
    dropless, o = _rates(8, moe_routing="dropless")
    load = o.dropless_expert_load
    assert load == DROPLESS_EXPERT_LOAD > 1
    assert balanced.expert_flops / dropless.expert_flops == pytest.approx(load)
    lat = o.collective_latency_us * 1e-6
    assert (dropless.dispatch_s - lat) / (balanced.dispatch_s - lat) == pytest.approx(load)
    one, _ = _rates(1, moe_routing="dropless")  # every expert on every rank: no busiest rank
    assert one.expert_flops == _rates(1, moe_routing="balanced")[0].expert_flops


def test_tokens_sent_once_per_node_keep_the_nic_share_at_the_nodes_load() -> None:
    # EP64 over 8 nodes, at most 4 nodes a token: NIC-bound; sent once per node the NIC share follows the node's
    # load, not the rank's; sent rank to rank the busiest rank's copies cross the NIC too
    args = (4096, 8, 7168, 64, 1, 8, 450, 50, 4)
    once = {"once_per_node": True}
    assert tm.expert_alltoall_seconds(*args, 1.7, **once) == tm.expert_alltoall_seconds(*args, 1.0, **once)
    assert tm.expert_alltoall_seconds(*args, 1.7) == pytest.approx(1.7 * tm.expert_alltoall_seconds(*args))


def test_experts_one_at_a_time_dispatch_their_own_ops() -> None:
    grouped, _ = _rates(8, moe_grouped_gemm=True)
    sequential, _ = _rates(8, moe_grouped_gemm=False)
    assert sequential.moe_kernels - grouped.moe_kernels == SEQUENTIAL_EXPERT_OPS * 128 / 8  # 16 local experts
    assert SEQUENTIAL_EXPERT_OPS == 16  # 6 forward ops per expert at the measured forward share 0.37


def test_the_allgather_dispatcher_takes_neither_ep_overlap_nor_fp8_dispatch() -> None:
    on = with_techniques_on(PlannerOptions(), "fp8")
    assert on.comm.ep_overlap and on.comm.dispatch_dtype == "fp8"
    off = with_techniques_on(PlannerOptions(moe_token_dispatcher="allgather"), "fp8")
    assert not off.comm.ep_overlap and off.comm.dispatch_dtype == "bf16" and off.comm.tp_overlap
    gathered, _ = _rates(8, moe_token_dispatcher="allgather")
    assert gathered.moe_permute_s == pytest.approx(2 * 8 * 4096 * 2048 * 2 / 3000e9)  # hidden 2048, bf16, 3 TB/s


def test_the_dropless_load_is_its_derivation_from_the_published_pairs() -> None:
    """The committed figure is what `dropless_expert_load` derives from ModelZoo's four forced/dropless pairs now
    (a change to the cost model that moves the derivation must move the figure too), each pair within 10% of it."""
    from benchmarks.bench_planner import dropless_expert_load

    derived = dropless_expert_load()
    assert derived["median"] == DROPLESS_EXPERT_LOAD
    assert all(abs(x / DROPLESS_EXPERT_LOAD - 1) < 0.1 for x in derived["per_seq_len"].values())


def test_the_ep_overlap_pairs_each_pass_with_the_other_micro_batchs_opposite_pass() -> None:
    # Megatron's EP all-to-all overlap (and DualPipe) hide a forward's all-to-alls behind another micro-batch's
    # backward and the backward's behind a forward: all-to-alls heavier than the forward show beyond it even
    # when the whole stage's compute could cover them
    d = _degrees(8)
    r, o = _rates(8, comm={"ep_overlap": True})
    tok = r.tokens
    forward = 1.5 * r.combine_s  # one MoE layer whose forward is its routed GEMMs, 1.5 combines long
    w = StageWork(1, 1, 0.0, forward * r.expert_flops / (2 * tok), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    s = stage_seconds(w, "none", r, 4096, d, o)
    assert s.compute_s == pytest.approx(3 * forward)
    forward_a2a, backward_a2a = r.dispatch_s + r.combine_s, 2 * r.combine_s
    assert s.ep_comm_s == pytest.approx(forward_a2a + backward_a2a)
    sm = o.overlap_sm_fraction * s.ep_comm_s
    paired = max(0.0, forward_a2a - 2 * forward) + max(0.0, backward_a2a - forward) + sm
    assert s.ep_exposed_s == pytest.approx(paired)
    assert s.ep_exposed_s > max(0.0, s.ep_comm_s - s.compute_s) + sm  # the whole stage would have hidden more
    r_off, o_off = _rates(8)
    off = stage_seconds(w, "none", r_off, 4096, d, o_off)
    assert off.ep_exposed_s == pytest.approx(s.ep_comm_s)


def test_an_all_gathered_cp_exchange_carries_the_repeated_heads_and_the_forward_waits_for_it() -> None:
    # PyTorch's context_parallel under the 'allgather' rotate method on torchtitan's Llama (K/V repeated to the
    # query heads before SDPA): the exchange grows by heads / K/V heads, and the forward's gather shows whole
    # where a ring would hide it behind the other blocks' attention
    s = _structure("llama-3-8b")
    assert s.num_attention_heads == 4 * s.num_kv_heads
    d = Degrees(
        tensor_parallel=1,
        pipeline_parallel=1,
        virtual_pipeline_stages=1,
        expert_parallel=1,
        expert_tensor_parallel=1,
        context_parallel=4,
        data_parallel=2,
        micro_batch=1,
        num_microbatches=1,
    )

    def stage(**options: object):
        o = PlannerOptions(**options)  # type: ignore[arg-type]
        costs = costs_for(s, o, "bf16")
        r = RateCache(costs, cluster_figures(H100, 8, 8), 131072, "bf16", o).rates(d)
        w = stage_work(costs, tuple(costs.layer_kind.count(i) for i in range(len(costs.kinds))), False)
        latency = 3 * (d.context_parallel - 1) * w.layers * r.collective_latency_s  # per exchange, whatever its size
        return w, stage_seconds(w, "none", r, 131072, d, o), latency

    ring_w, ring, latency = stage()
    gathered_w, gathered, _ = stage(cp_kv_exchange="allgather", cp_kv_repeated=True)
    assert gathered_w.cp_kv == pytest.approx(4 * ring_w.cp_kv)
    assert gathered.cp_comm_s - latency == pytest.approx(4 * (ring.cp_comm_s - latency))
    assert ring.cp_exposed_s == 0.0  # at 128K the ring hides behind the attention
    assert gathered.cp_exposed_s == pytest.approx(gathered.cp_comm_s / 3)  # the forward's gather; the backward hides
    assert gathered.slot_s == pytest.approx(ring.slot_s + gathered.cp_exposed_s)
