"""A cheap lower bound on a plan's step time that needs no per-rank work, for ordering and cutting
degree tuples before the full cost model runs.

Contract: `StaticBound(...)(d) <= PlanContext(...).time(k).step_s` for every knob setting `k`. It calls
the cost model's own terms (`step_time`, `memory`) with the *mean* pipeline stage: the whole model's
work divided by PP. The slowest stage is never faster than the mean, and each stage term is convex
in the stage's work (Jensen's inequality), so the mean stage's time bounds the slowest stage's; the
activation-offload term (>= 0) is left out; DP and optimizer terms take their minimum over the allowed
ZeRO stages and offload choices. Everything that does not depend on the degrees is computed once.
"""

from __future__ import annotations

from day0.planner import memory as mem
from day0.planner import step_time as st
from day0.planner import timing as tm
from day0.planner.inputs import ClusterFigures, PlannerOptions
from day0.planner.model import ModelCosts
from day0.planner.stages import layer_counts, stage_work
from day0.planner.values import RECOMPUTES, Degrees
from day0.spec import TrainingSpec

__all__ = ["StaticBound", "static_lower_bound"]


class StaticBound:
    def __init__(self, costs: ModelCosts, cluster: ClusterFigures, training: TrainingSpec, options: PlannerOptions):
        self.costs, self.cluster, self.training, self.o = costs, cluster, training, options
        prec = training.precision
        counts = layer_counts(costs)
        self.work = stage_work(costs, counts, has_head=True)
        ks = [(n, k) for n, k in zip(counts, costs.kinds)]
        self.dense = sum(n * k.dense_params for n, k in ks)
        self.replicated = sum(n * k.replicated_params for n, k in ks)
        self.expert = sum(n * k.expert_params for n, k in ks)
        self.pb = mem.param_bytes(prec.compute, prec.master_weights, options.grad_dtype, options.optimizer_state_dtype)
        self.grad = st.grad_reduce_bytes(options.comm, self.pb)
        # the stage time grows with recompute unless TP and EP comm both overlap the same compute (then more
        # recompute can hide more of both): only then is the minimum over every allowed mode needed
        allowed = [rc for rc in RECOMPUTES if rc in options.recompute]
        both = options.comm.tp_overlap and options.comm.ep_overlap
        self.recompute = allowed if both else allowed[:1]
        self.optimizer_per_param = min(st.optimizer_seconds_per_param(off, self.pb, options) for off in options.offload)

    def __call__(self, d: Degrees) -> float:
        o, tr, pp = self.o, self.training, d.pipeline_parallel
        rates = st.step_rates(self.costs, self.cluster, tr.seq_len, tr.precision.compute, o, d)
        mean = self.work.scaled(1 / pp)
        slot = min(st.stage_seconds(mean, rc, rates, tr.seq_len, d, o).slot_s for rc in self.recompute) + rates.p2p_s
        pipe = tm.pipeline_seconds(d.num_microbatches, pp, d.virtual_pipeline_stages, slot, o.dualpipe)[0]
        return (pipe + self._dp_and_optimizer(d, slot, rates.dp_bandwidth)) * (1 - 1e-9)

    def _dp_and_optimizer(self, d: Degrees, slot: float, bandwidth: float) -> float:
        """min over ZeRO stages of exposed DP sync + the cheapest optimizer update, for the mean stage."""
        tp, pp = d.tensor_parallel, d.pipeline_parallel
        dense, expert = mem.rank_params(
            self.dense, self.replicated, self.expert, tp, d.expert_parallel, d.expert_tensor_parallel
        )
        ends = [(True, pp == 1)] + ([(False, True)] if pp > 1 else [])  # the first and the last stage
        embhead = sum(mem.embedding_head_params(self.costs, tp, pp, e, h) for e, h in ends)
        dense, expert = (dense + embhead) / pp, expert / pp
        o, pb = self.o, self.pb
        return min(
            st.dp_exposed_seconds(
                st.dp_sync_seconds(dense, expert, z, self.grad, pb.weight, d, bandwidth),
                slot,
                z,
                d.num_microbatches,
                o.comm.dp_overlap,
            )
            + st.optimizer_params(dense, expert, z, d) * self.optimizer_per_param
            for z in o.zero_stages
        )


def static_lower_bound(
    costs: ModelCosts, cluster: ClusterFigures, training: TrainingSpec, d: Degrees, options: PlannerOptions
) -> float:
    """One-off `StaticBound` (the search builds it once and calls it per tuple)."""
    return StaticBound(costs, cluster, training, options)(d)
