"""A cheap lower bound on a plan's step time that needs no per-rank work, for ordering and cutting
degree tuples before the full cost model runs.

Contract: `StaticBound(problem)(d) <= PlanContext(problem, d).time(k).step_s` for every knob setting `k`. It calls
the cost model's own terms (`step_time`, `memory`) with the *mean* pipeline stage: the whole model's
work divided by PP. The slowest stage is never faster than the mean, and each stage term is convex
in the stage's work (Jensen's inequality), so the mean stage's time bounds the slowest stage's; the
recompute modes enter through `step_time.slot_floor`, the least slot any of them can reach (convex in
the work too: a convex function minimised over a convex set); the activation-offload term (>= 0) is
left out; DP and optimizer terms take their minimum over the allowed ZeRO stages and offload choices.
Everything that does not depend on the degrees is computed once.
"""

from __future__ import annotations

from day0.planner import memory as mem
from day0.planner import step_time as st
from day0.planner import timing as tm
from day0.planner.problem import PlanningProblem
from day0.planner.rates import RateCache
from day0.planner.stages import layer_counts, stage_work
from day0.planner.step_time import StageWork
from day0.planner.values import Degrees

__all__ = ["StaticBound", "static_lower_bound"]


class StaticBound:
    def __init__(self, problem: PlanningProblem):
        costs, cluster, training, options = problem.costs, problem.cluster, problem.training, problem.options
        self.costs, self.cluster, self.training, self.o = costs, cluster, training, options
        prec = training.precision
        self.rates = RateCache(costs, cluster, training.seq_len, prec.compute, options)
        counts = layer_counts(costs)
        self.work = stage_work(costs, counts, has_head=True)
        self._mean: dict[int, StageWork] = {}
        self._quick: dict[tuple, float] = {}
        self._stage_params: dict[tuple, tuple[float, float]] = {}
        ks = [(n, k) for n, k in zip(counts, costs.kinds)]
        self.dense = sum(n * k.dense_params for n, k in ks)
        self.replicated = sum(n * k.replicated_params for n, k in ks)
        self.expert = sum(n * k.expert_params for n, k in ks)
        self.pb = mem.param_bytes(prec.compute, prec.master_weights, options.grad_dtype, options.optimizer_state_dtype)
        self.grad = st.grad_reduce_bytes(options.comm, self.pb)
        self.zero_stages = st.least_zero_stages(options.zero_stages, self.grad, self.pb.weight)
        self.recompute = st.floor_modes(options.recompute)
        # block recompute repeats only some layers, unevenly over the stages: the bound takes none of them
        self.full_fraction = 0.0 if options.recompute_method == "block" else 1.0
        self.optimizer_per_param = min(st.optimizer_seconds_per_param(off, self.pb, options) for off in options.offload)

    def __call__(self, d: Degrees) -> float:
        o, tr, pp = self.o, self.training, d.pipeline_parallel
        rates = self.rates.rates(d)
        mean = self._mean.get(pp)
        if mean is None:
            mean = self._mean[pp] = self.work.scaled(1 / pp)
        slot = (
            min(
                st.slot_floor(
                    st.stage_seconds(mean, rc, rates, tr.seq_len, d, o, self.full_fraction),
                    o.comm,
                    o.overlap_sm_fraction,
                    rates.launch_async,
                )
                for rc in self.recompute
            )
            + rates.p2p_s
        )
        pipe = tm.pipeline_seconds(d.num_microbatches, pp, d.virtual_pipeline_stages, slot, o.dualpipe)[0]
        return (pipe + self._dp_and_optimizer(d, slot, rates.dp_bandwidth, rates.expert_dp_bandwidth)) * (1 - 1e-9)

    def quick(self, d: Degrees) -> float:
        """A cheaper bound, never above `self(d)`: the pipeline term of the mean stage's compute, its TP and
        EP collectives at what overlap cannot hide (all, or the SM share), its exposed CP ring and its
        point-to-point (recompute, host dispatch, DP sync and the optimizer are >= 0 and left out). The
        whole model's part depends on TP, CP, micro-batch, EP and expert-TP only: cached on them."""
        key = (d.tensor_parallel, d.context_parallel, d.micro_batch, d.expert_parallel, d.expert_tensor_parallel)
        whole = self._quick.get(key)
        if whole is None:
            whole = self._quick[key] = self._whole_model_slot(d)
        pp = d.pipeline_parallel
        slot = whole / pp + self.rates.p2p_seconds(d)
        pipe = tm.pipeline_seconds(d.num_microbatches, pp, d.virtual_pipeline_stages, slot, self.o.dualpipe)[0]
        return pipe * (1 - 1e-8)

    def _whole_model_slot(self, d: Degrees) -> float:
        r, w, seq, o = self.rates.rates(d), self.work, self.training.seq_len, self.o
        tok = r.tokens / d.tensor_parallel
        attn = tok * seq * w.attn_per_seq / r.attention_flops
        attn += 0.0 if o.flash_attention else tok * seq * w.scores_traffic_per_seq / r.hbm
        passes = st.attention_passes(o.flash_attention)
        compute = passes * attn + 3 * (
            2 * tok * w.dense_active / r.linear_flops
            + tok * w.head_flops / r.head_flops
            + 2 * tok * w.routed_active / r.expert_flops
            + tok * w.memory_bound / r.hbm
            + w.moe_layers * r.moe_permute_s
        )
        sm = o.overlap_sm_fraction
        tp = w.layers * 8 * r.tp_ring_s * (sm if o.comm.tp_overlap else 1.0)
        ep = w.moe_layers * (r.dispatch_s + 3 * r.combine_s) * (sm if o.comm.ep_overlap else 1.0)
        cp_deg = d.context_parallel
        cp = st.cp_ring_seconds(tok, w, r, cp_deg)
        return compute + tp + ep + max(0.0, cp - passes * attn * (cp_deg - 1) / cp_deg)

    def _mean_stage_params(self, tp: int, pp: int, ep: int, etp: int) -> tuple[float, float]:
        """(dense, expert) parameters of a rank of the mean stage."""
        dense, expert = mem.rank_params(self.dense, self.replicated, self.expert, tp, ep, etp)
        ends = [(True, pp == 1)] + ([(False, True)] if pp > 1 else [])  # the first and the last stage
        embhead = sum(mem.embedding_head_params(self.costs, tp, pp, e, h) for e, h in ends)
        return (dense + embhead) / pp, expert / pp

    def _dp_and_optimizer(self, d: Degrees, slot: float, bandwidth: float, expert_bandwidth: float) -> float:
        """min over ZeRO stages of exposed DP sync + the cheapest optimizer update, for the mean stage."""
        key = (d.tensor_parallel, d.pipeline_parallel, d.expert_parallel, d.expert_tensor_parallel)
        hit = self._stage_params.get(key)
        if hit is None:
            hit = self._stage_params[key] = self._mean_stage_params(*key)
        dense, expert = hit
        o, pb = self.o, self.pb
        return min(
            st.dp_exposed_seconds(
                st.dp_sync_seconds(dense, expert, z, self.grad, pb.weight, d, bandwidth, expert_bandwidth),
                slot,
                z,
                d.num_microbatches,
                o.comm.dp_overlap,
            )
            + st.optimizer_params(dense, expert, z, d) * self.optimizer_per_param
            for z in self.zero_stages
        )


def static_lower_bound(problem: PlanningProblem, d: Degrees) -> float:
    """One-off `StaticBound` (the search builds it once and calls it per tuple)."""
    return StaticBound(problem)(d)
