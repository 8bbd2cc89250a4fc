"""A cheap lower bound on a plan's step time that needs no per-rank work, for ordering and cutting
degree tuples before the full cost model runs.

Contract: `StaticBound(...)(d) <= PlanContext(...).time(k).step` for every knob setting `k`. It uses the
*average* pipeline stage (the slowest stage is never faster than the mean: every per-rank term below is
linear in the rank's layers, or convex, so Jensen's inequality applies) with no recompute, and the
smallest DP/optimizer terms over the allowed ZeRO stages and offload choices. Everything that does not
depend on the degrees is computed once per search.
"""

from __future__ import annotations

from day0.planner import timing as tm
from day0.planner.inputs import ClusterFigures, PlannerOptions
from day0.planner.memory import param_bytes
from day0.planner.model import ModelCosts
from day0.planner.values import Degrees
from day0.spec import TrainingSpec

__all__ = ["StaticBound", "static_lower_bound"]


class StaticBound:
    def __init__(self, costs: ModelCosts, cluster: ClusterFigures, training: TrainingSpec, options: PlannerOptions):
        ks = [costs.kinds[i] for i in costs.layer_kind]
        s, o, cl, prec = training.seq_len, options, cluster, training.precision
        self.costs, self.cl, self.o, self.seq = costs, cl, o, s
        self.lin = sum(2 * (k.active_params - k.routed_active_params) for k in ks) + costs.head_flops_per_token
        self.routed = sum(2 * k.routed_active_params for k in ks)
        self.attn = s * sum(k.attn_flops_per_seq for k in ks)
        self.layers, self.moe, self.cp_kv = len(ks), sum(k.is_moe for k in ks), sum(k.cp_kv_bytes for k in ks)
        self.dense = sum(k.dense_params for k in ks)
        self.rep = sum(k.replicated_params for k in ks)
        self.expert = sum(k.expert_params for k in ks)
        fp8 = prec.compute == "fp8" and cl.fp8_tflops
        self.peak = (cl.fp8_tflops if fp8 else cl.bf16_tflops) * 1e12
        self.attn_peak = cl.bf16_tflops * 1e12
        self.intra, self.inter = cl.intra_node_bandwidth_gbps, cl.inter_node_bandwidth_gbps
        self.pb = param_bytes(prec.compute, prec.master_weights, o.grad_dtype, o.optimizer_state_dtype)
        self.g = {"fp32": 4, "bf16": 2}[o.comm.grad_reduce_dtype] if o.comm.grad_reduce_dtype else self.pb.grad
        self.disp = 1 if o.comm.dispatch_dtype == "fp8" else 2
        self.opt_device = (tm.OPTIMIZER_BYTES_TOUCHED + self.pb.grad + self.pb.weight) / (o.hbm_bandwidth_gbps * 1e9)
        self.opt_host = (self.pb.grad + self.pb.weight) / (o.host_bandwidth_gbps * 1e9) + 1 / o.cpu_adam_params_per_s
        self.opt_per_param = min(self.opt_host if off == "optimizer" else self.opt_device for off in o.offload)

    def __call__(self, d: Degrees) -> float:
        o, cl, c = self.o, self.cl, self.costs
        tokens = self.seq * d.micro_batch / d.cp
        tok = tokens / d.tp
        eff = tm.gemm_efficiency(tokens, o.compute_efficiency, o.gemm_half_tokens)
        ex_eff = tm.gemm_efficiency(tm.expert_rows(tok, c.top_k, d.ep, d.etp, c.num_experts), o.compute_efficiency,
                                    o.gemm_half_tokens)
        slot = 3 * tok * (self.lin / (self.peak * eff) + self.routed / (self.peak * ex_eff)
                          + self.attn / (self.attn_peak * eff)) / d.pp
        if not o.comm.tp_overlap:
            slot += self.layers / d.pp * 8 * tm.ring_seconds(tokens * c.hidden * 2, d.tp, self.intra * 1e9)
        if not o.comm.ep_overlap and d.ep > 1:
            a2a = [tm.alltoall_seconds(tok * c.top_k * c.hidden * b, d.ep, d.etp, cl.per_node, self.intra, self.inter)
                   for b in (self.disp, 2)]
            slot += self.moe / d.pp * (a2a[0] + 3 * a2a[1])
        if d.cp > 1:
            cp_bw = tm.link_bandwidth(d.tp * d.cp, cl.per_node, self.intra, self.inter)
            slot += max(0.0, 3 * (d.cp - 1) * tok * self.cp_kv / cp_bw / d.pp
                        - 3 * tok * self.attn / (self.attn_peak * eff) / d.pp)
        if d.pp > 1:
            slot += 2 * d.vpp * tok * c.hidden * 2 / tm.link_bandwidth(d.tp * d.cp * d.dp * 2, cl.per_node,
                                                                         self.intra, self.inter)
        pipe = tm.pipeline_seconds(d.num_microbatches, d.pp, d.vpp, slot)[0]
        return (pipe + self._dp_and_optimizer(d, slot)) * (1 - 1e-9)

    def _dp_and_optimizer(self, d: Degrees, slot: float) -> float:
        c, o, pb, m = self.costs, self.o, self.pb, d.num_microbatches
        dd, edp = d.dp * d.cp, d.tp * d.cp * d.dp // (d.ep * d.etp)
        embhead = c.embedding_params + c.head_params + (c.embedding_params if c.tied and d.pp > 1 else 0)
        dense = (self.dense / d.tp + self.rep + embhead / d.tp) / d.pp
        expert = self.expert / (d.ep * d.etp) / d.pp
        bw = tm.link_bandwidth(d.tp * d.cp * d.dp, self.cl.per_node, self.intra, self.inter)
        best = float("inf")
        for z in o.zero_stages:
            dp = tm.ring_seconds(tm.dp_sync_bytes(dense, self.g, pb.weight, z, m), dd, bw) \
                + tm.ring_seconds(tm.dp_sync_bytes(expert, self.g, pb.weight, z, m), edp, bw)
            exposed = tm.exposed(dp, slot, o.comm.dp_overlap) if z <= 1 else m * tm.exposed(dp / m, slot,
                                                                                           o.comm.dp_overlap)
            params = dense / (dd if z else 1) + expert / (edp if z else 1)
            best = min(best, exposed + params * self.opt_per_param)
        return best


def static_lower_bound(costs: ModelCosts, cluster: ClusterFigures, training: TrainingSpec, d: Degrees,
                       options: PlannerOptions) -> float:
    """One-off `StaticBound` (the search builds it once and calls it per tuple)."""
    return StaticBound(costs, cluster, training, options)(d)
