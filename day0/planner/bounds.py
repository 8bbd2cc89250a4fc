"""A cheap lower bound on a plan's step time that needs no per-rank work, for ordering and cutting
degree tuples before the full cost model runs.

Contract: `static_lower_bound(...) <= PlanContext(...).time(k).step` for every knob setting `k`. It uses
the *average* pipeline stage (the slowest stage is never faster than the mean: every per-rank term below
is linear in the rank's layers, or convex, so Jensen's inequality applies) with no recompute, and the
smallest DP/optimizer terms over the allowed ZeRO stages and offload choices.
"""

from __future__ import annotations

from functools import lru_cache

from day0.planner import timing as tm
from day0.planner.evaluate import Degrees
from day0.planner.inputs import ClusterFigures, PlannerOptions
from day0.planner.memory import param_bytes
from day0.planner.model import ModelCosts
from day0.spec import TrainingSpec

__all__ = ["static_lower_bound"]

_OPT_BYTES_TOUCHED = 2 * 4 + 2 * 8


@lru_cache(maxsize=64)
def _totals(costs: ModelCosts, seq: int) -> dict[str, float]:
    ks = [costs.kinds[i] for i in costs.layer_kind]
    return {"lin": sum(2 * (k.active_params - k.routed_active_params) for k in ks) + costs.head_flops_per_token,
            "routed": sum(2 * k.routed_active_params for k in ks),
            "attn": seq * sum(k.attn_flops_per_seq for k in ks), "layers": len(ks),
            "moe": sum(k.is_moe for k in ks), "cp_kv": sum(k.cp_kv_bytes for k in ks),
            "dense": sum(k.dense_params for k in ks), "rep": sum(k.replicated_params for k in ks),
            "expert": sum(k.expert_params for k in ks)}


def static_lower_bound(costs: ModelCosts, cluster: ClusterFigures, training: TrainingSpec, d: Degrees,
                       options: PlannerOptions) -> float:
    t, s, o, cl = _totals(costs, training.seq_len), training.seq_len, options, cluster
    tokens = s * d.micro_batch / d.cp
    tok = tokens / d.tp
    eff = tm.gemm_efficiency(tokens, o.compute_efficiency, o.gemm_half_tokens)
    fp8 = training.precision.compute == "fp8" and cl.fp8_tflops
    peak = (cl.fp8_tflops if fp8 else cl.bf16_tflops) * 1e12
    lin_rate, attn_rate = peak * eff, cl.bf16_tflops * 1e12 * eff
    ex_rate = peak * tm.gemm_efficiency(tm.expert_rows(tok, costs.top_k, d.ep, d.etp, costs.num_experts),
                                        o.compute_efficiency, o.gemm_half_tokens)
    intra, inter = cl.intra_node_bandwidth_gbps, cl.inter_node_bandwidth_gbps
    slot = 3 * tok * (t["lin"] / lin_rate + t["routed"] / ex_rate + t["attn"] / attn_rate) / d.pp
    if not o.comm.tp_overlap:
        slot += t["layers"] / d.pp * 8 * tm.ring_seconds(tokens * costs.hidden * 2, d.tp, intra * 1e9)
    if not o.comm.ep_overlap and d.ep > 1:
        disp = 1 if o.comm.dispatch_dtype == "fp8" else 2
        a2a = [tm.alltoall_seconds(tok * costs.top_k * costs.hidden * b, d.ep, d.etp, cl.per_node, intra, inter)
               for b in (disp, 2)]
        slot += t["moe"] / d.pp * (a2a[0] + 3 * a2a[1])
    if d.cp > 1:
        cp_bw = tm.link_bandwidth(d.tp * d.cp, cl.per_node, intra, inter)
        slot += max(0.0, 3 * (d.cp - 1) * tok * t["cp_kv"] / cp_bw / d.pp - 3 * tok * t["attn"] / attn_rate / d.pp)
    if d.pp > 1:
        slot += 2 * d.vpp * tok * costs.hidden * 2 / tm.link_bandwidth(d.tp * d.cp * d.dp * 2, cl.per_node, intra, inter)
    pipe = tm.pipeline_seconds(d.num_microbatches, d.pp, d.vpp, slot)[0]
    return (pipe + _dp_and_optimizer(costs, cl, training, d, o, t, slot)) * (1 - 1e-9)


def _dp_and_optimizer(costs: ModelCosts, cl: ClusterFigures, training: TrainingSpec, d: Degrees,
                      o: PlannerOptions, t: dict[str, float], slot: float) -> float:
    prec = training.precision
    pb = param_bytes(prec.compute, prec.master_weights, o.grad_dtype, o.optimizer_state_dtype)
    g = {"fp32": 4, "bf16": 2}[o.comm.grad_reduce_dtype] if o.comm.grad_reduce_dtype else pb.grad
    dd, edp = d.dp * d.cp, d.tp * d.cp * d.dp // (d.ep * d.etp)
    embhead = costs.embedding_params + costs.head_params + (costs.embedding_params if costs.tied and d.pp > 1 else 0)
    dense = (t["dense"] / d.tp + t["rep"] + embhead / d.tp) / d.pp
    expert = t["expert"] / (d.ep * d.etp) / d.pp
    bw = tm.link_bandwidth(d.tp * d.cp * d.dp, cl.per_node, cl.intra_node_bandwidth_gbps, cl.inter_node_bandwidth_gbps)
    best = float("inf")
    for z in o.zero_stages:
        dp = tm.ring_seconds(tm.dp_sync_bytes(dense, g, pb.weight, z, d.num_microbatches), dd, bw) \
            + tm.ring_seconds(tm.dp_sync_bytes(expert, g, pb.weight, z, d.num_microbatches), edp, bw)
        m = d.num_microbatches
        exposed = tm.exposed(dp, slot, o.comm.dp_overlap) if z <= 1 else m * tm.exposed(dp / m, slot, o.comm.dp_overlap)
        params = dense / (dd if z else 1) + expert / (edp if z else 1)
        opt = min(params * (g_ + w_) / (o.host_bandwidth_gbps * 1e9) + params / o.cpu_adam_params_per_s
                  if off == "optimizer" else params * (_OPT_BYTES_TOUCHED + pb.grad + pb.weight) / (o.hbm_bandwidth_gbps * 1e9)
                  for off in o.offload for g_, w_ in ((pb.grad, pb.weight),))
        best = min(best, exposed + opt)
    return best
