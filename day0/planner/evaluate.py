"""The cost model: memory per accelerator and time per step for one plan (degrees + memory knobs).

Contract: `PlanContext(costs, cluster, training, degrees, options)` precomputes everything that depends
only on the parallel degrees; `memory(knobs)` and `time(knobs)` are then cheap, pure and deterministic,
so the pruned search and the brute-force enumerator give bit-identical numbers for the same plan.
Lower bounds (`time_lower_bound`, `memory_lower_bound`) never exceed the value of any knob setting.
"""

from __future__ import annotations

from day0.planner import memory as mem
from day0.planner import timing as tm
from day0.planner.inputs import GIB, ClusterFigures, PlannerOptions
from day0.planner.model import ModelCosts
from day0.planner.stages import rank_groups
from day0.planner.values import OFFLOADS, RECOMPUTES, Degrees, Knobs, MemoryEstimate, TimeEstimate
from day0.spec import TrainingSpec

__all__ = ["RECOMPUTES", "OFFLOADS", "Degrees", "Knobs", "MemoryEstimate", "PlanContext", "TimeEstimate"]


class PlanContext:
    """Everything about one degree tuple that does not depend on the memory knobs (computed lazily)."""

    def __init__(self, costs: ModelCosts, cluster: ClusterFigures, training: TrainingSpec, d: Degrees,
                 options: PlannerOptions):
        self.costs, self.cluster, self.training, self.d, self.o = costs, cluster, training, d, options
        prec = training.precision
        self.pb = mem.param_bytes(prec.compute, prec.master_weights, options.grad_dtype, options.optimizer_state_dtype)
        self.groups, self.layers_per_rank = rank_groups(costs, d.pp, d.vpp, training.seq_len)
        self.tokens = training.seq_len * d.micro_batch / d.cp  # per rank, gathered over TP (SP)
        self.dd = d.dp * d.cp
        self.edp = d.tp * d.cp * d.dp // (d.ep * d.etp)
        self.capacity = cluster.memory_bytes
        self._mem_ready = self._time_ready = False
        self._cache: dict[tuple, float | tuple[float, float]] = {}

    # --- memory precomputation ------------------------------------------------------------------
    def _prepare_memory(self) -> None:
        c, d, o, s, groups = self.costs, self.d, self.o, self.training.seq_len, self.groups
        self.dense = [g.dense / d.tp + g.replicated for g in groups]
        self.expert = [g.expert / (d.ep * d.etp) for g in groups]
        self.embhead = [(c.embedding_params / d.tp if g.has_embedding else 0.0)
                        + (c.head_params / d.tp if g.has_head else 0.0)
                        + (c.embedding_params / d.tp if g.has_head and c.tied and d.pp > 1 else 0.0) for g in groups]
        self.max_layer_params = max(k.dense_params / d.tp + k.replicated_params + k.expert_params / (d.ep * d.etp)
                                    for k in c.kinds)
        self.act = {rc: [self.tokens * mem.activation_bytes(g.act_main, g.act_expert, g.act_scores_per_seq, rc, d.tp,
                                                            d.etp, s, o.flash_attention) for g in groups]
                    for rc in RECOMPUTES}
        per_kind = {rc: [mem.activation_bytes_per_token(k, rc, d.tp, d.etp, s, o.flash_attention) for k in c.kinds]
                    for rc in RECOMPUTES}
        self.working = {rc: self.tokens * max(a - b for a, b in zip(per_kind["none"], per_kind[rc]))
                        for rc in RECOMPUTES}
        self.inflight = [mem.inflight_microbatches(g.first_rank, d.pp, d.vpp, d.num_microbatches) for g in groups]
        self.logits = [mem.logits_bytes(self.tokens, c.vocab, d.tp) if g.has_head else 0.0 for g in groups]
        tp_buf = 2 * self.tokens * c.hidden * 2 if d.tp > 1 else 0.0
        a2a_buf = 2 * self.tokens / d.tp * c.top_k * c.hidden * 2 if d.ep > 1 else 0.0
        self.comm_base = tp_buf + a2a_buf
        self.framework = o.framework_overhead_gib * GIB
        self.reserve = o.fragmentation_fraction * self.capacity
        self.host_capacity = self.cluster.host_memory_gib_per_accelerator * GIB
        self._mem_ready = True

    # --- memory -------------------------------------------------------------------------------
    def _group_memory(self, i: int, k: Knobs) -> MemoryEstimate:
        pb, z, off_opt = self.pb, k.zero_stage, k.offload == "optimizer"
        w1, g1, o1, h1 = mem.model_state_bytes(self.dense[i], self.dd, z, pb, off_opt)
        w2, g2, o2, h2 = mem.model_state_bytes(self.expert[i], self.edp, z, pb, off_opt)
        w3, g3, o3, h3 = mem.model_state_bytes(self.embhead[i], self.dd, z, pb, off_opt)
        per_mb = self.act[k.recompute][i]
        inflight = self.inflight[i]
        host = h1 + h2 + h3
        if k.offload == "activations":  # keep the running and the next-prefetched micro-batch on device
            host += per_mb * max(0.0, inflight - 2)
            inflight = min(inflight, 2.0)
        acts = per_mb * inflight
        comm = self.comm_base + (mem.zero3_prefetch_bytes(self.max_layer_params, pb.weight) if z >= 3 else 0.0)
        working = self.working[k.recompute]
        total = (w1 + w2 + g1 + g2 + o1 + o2 + w3 + g3 + o3 + acts + working + self.logits[i] + comm
                 + self.framework + self.reserve)
        return MemoryEstimate(self.groups[i].first_rank, w1 + w2, g1 + g2, o1 + o2, w3 + g3 + o3, acts, inflight,
                              per_mb, working, self.logits[i], comm, self.framework, self.reserve, total,
                              self.capacity, host, self.host_capacity)

    def memory(self, k: Knobs) -> MemoryEstimate:
        """The pipeline rank with the highest total (the one that decides feasibility)."""
        if not self._mem_ready:
            self._prepare_memory()
        return max((self._group_memory(i, k) for i in range(len(self.groups))), key=lambda m: (m.total, -m.rank))

    def memory_lower_bound(self) -> float:
        """max over ranks of the sum of each term's minimum over the allowed knobs (a relaxation)."""
        if not self._mem_ready:
            self._prepare_memory()
        o, pb = self.o, self.pb
        zmax, opt_off, act_off = max(o.zero_stages), "optimizer" in o.offload, "activations" in o.offload
        best = 0.0
        for i in range(len(self.groups)):
            states = 0.0
            for params, shard in ((self.dense[i] + self.embhead[i], self.dd), (self.expert[i], self.edp)):
                w, g, opt, _ = mem.model_state_bytes(params, shard, zmax, pb, opt_off)
                states += w + g + opt
            infl = min(self.inflight[i], 2.0) if act_off else self.inflight[i]
            acts = min(self.act[rc][i] * infl + self.working[rc] for rc in o.recompute)
            best = max(best, states + acts + self.logits[i] + self.comm_base + self.framework + self.reserve)
        return best

    # --- time precomputation ------------------------------------------------------------------
    def _prepare_time(self) -> None:
        c, d, o, cl, s = self.costs, self.d, self.o, self.cluster, self.training.seq_len
        eff = tm.gemm_efficiency(self.tokens, o.compute_efficiency, o.gemm_half_tokens)
        fp8 = self.training.precision.compute == "fp8" and cl.fp8_tflops
        peak = (cl.fp8_tflops if fp8 else cl.bf16_tflops) * 1e12
        lin_rate, attn_rate = peak * eff, cl.bf16_tflops * 1e12 * eff
        tok = self.tokens / d.tp
        ex_rate = peak * tm.gemm_efficiency(tm.expert_rows(tok, c.top_k, d.ep, d.etp, c.num_experts),
                                            o.compute_efficiency, o.gemm_half_tokens)
        intra, inter = cl.intra_node_bandwidth_gbps, cl.inter_node_bandwidth_gbps
        tp_ring = tm.ring_seconds(self.tokens * c.hidden * 2, d.tp, intra * 1e9)
        disp = 1 if o.comm.dispatch_dtype == "fp8" else 2
        a2a = [tm.alltoall_seconds(tok * c.top_k * c.hidden * b, d.ep, d.etp, cl.per_node, intra, inter)
               for b in (disp, 2)]
        cp_bw = tm.link_bandwidth(d.tp * d.cp, cl.per_node, intra, inter)
        self.stage: dict[str, list[float]] = {rc: [] for rc in RECOMPUTES}
        self.parts: dict[str, list[tuple[float, ...]]] = {rc: [] for rc in RECOMPUTES}
        self.compute_s = []
        for g in self.groups:
            lin = 2 * tok * (g.active - g.routed_active)
            routed = 2 * tok * g.routed_active
            head = tok * c.head_flops_per_token if g.has_head else 0.0
            attn = tok * s * g.attn_per_seq
            compute = 3 * ((lin + head) / lin_rate + routed / ex_rate + attn / attn_rate)
            sel = tok * g.selective_flops / lin_rate + (0.0 if o.flash_attention else attn / attn_rate)
            cp = 3 * (d.cp - 1) * tok * g.cp_kv / cp_bw if d.cp > 1 else 0.0
            cp_exposed = max(0.0, cp - 3 * attn / attn_rate)  # ring attention overlaps the KV exchange
            self.compute_s.append(compute)
            for rc, extra in (("none", 0.0), ("selective", sel), ("full", lin / lin_rate + routed / ex_rate + attn / attn_rate)):
                full = rc == "full"
                tp = g.layers * (8 + 4 * full) * tp_ring
                ep = g.moe_layers * (a2a[0] + 3 * a2a[1] + full * (a2a[0] + a2a[1]))
                busy = compute + extra
                slot = busy + tm.exposed(tp, busy, o.comm.tp_overlap) + tm.exposed(ep, busy, o.comm.ep_overlap) \
                    + cp_exposed
                self.parts[rc].append((extra, tp, ep, cp))
                self.stage[rc].append(slot)
        p2p_bw = tm.link_bandwidth(d.tp * d.cp * d.dp * 2, cl.per_node, intra, inter)
        self.p2p = 2 * d.vpp * tok * c.hidden * 2 / p2p_bw if d.pp > 1 else 0.0
        self.dense_bw = tm.link_bandwidth(d.tp * d.cp * d.dp, cl.per_node, intra, inter)
        self.model_flops = self.training.global_batch * s * (
            6 * (c.params_active - c.embedding_params)
            + 3 * s * sum(c.kinds[i].attn_flops_per_seq for i in c.layer_kind))
        if not self._mem_ready:
            self._prepare_memory()
        self._time_ready = True

    # --- time ---------------------------------------------------------------------------------
    def _dp_seconds(self, zero: int) -> float:
        key = ("dp", zero)
        if key in self._cache:
            return self._cache[key]  # type: ignore[return-value]
        pb, d, o = self.pb, self.d, self.o
        g = {"fp32": 4, "bf16": 2}[o.comm.grad_reduce_dtype] if o.comm.grad_reduce_dtype else pb.grad
        worst = 0.0
        for i in range(len(self.groups)):
            dense = tm.dp_sync_bytes(self.dense[i] + self.embhead[i], g, pb.weight, zero, d.num_microbatches)
            expert = tm.dp_sync_bytes(self.expert[i], g, pb.weight, zero, d.num_microbatches)
            worst = max(worst, tm.ring_seconds(dense, self.dd, self.dense_bw)
                        + tm.ring_seconds(expert, self.edp, self.dense_bw))
        self._cache[key] = worst
        return worst

    def _optimizer_seconds(self, zero: int, offload: str) -> float:
        key = ("opt", zero, offload)
        if key not in self._cache:
            self._cache[key] = self._optimizer_seconds_uncached(zero, offload)
        return self._cache[key]  # type: ignore[return-value]

    def _optimizer_seconds_uncached(self, zero: int, offload: str) -> float:
        pb, o = self.pb, self.o
        params = max((self.dense[i] + self.embhead[i]) / (self.dd if zero else 1)
                     + self.expert[i] / (self.edp if zero else 1) for i in range(len(self.groups)))
        if offload == "optimizer":  # ZeRO-Offload (Ren et al. 2021): grads down, weights up, Adam on the CPU
            return params * (pb.grad + pb.weight) / (o.host_bandwidth_gbps * 1e9) + params / o.cpu_adam_params_per_s
        return params * (tm.OPTIMIZER_BYTES_TOUCHED + pb.grad + pb.weight) / (o.hbm_bandwidth_gbps * 1e9)

    def _slot(self, rc: str, offload: str) -> tuple[float, float, int]:
        """(slowest stage's time per micro-batch incl. p2p, activation-offload time in it, its group)."""
        worst, worst_off, which = -1.0, 0.0, 0
        for i in range(len(self.groups)):
            slot, off = self.stage[rc][i], 0.0
            if offload == "activations":
                off = max(0.0, 2 * self.act[rc][i] / (self.o.host_bandwidth_gbps * 1e9) - self.compute_s[i])
            if slot + off > worst:
                worst, worst_off, which = slot + off, off, i
        return worst + self.p2p, worst_off, which

    def _dp_exposed(self, zero: int, slot: float) -> float:
        d, dp, overlap = self.d, self._dp_seconds(zero), self.o.comm.dp_overlap
        if zero <= 1:
            return tm.exposed(dp, slot, overlap)
        # per micro-batch collectives, each hidden behind one micro-batch of compute at best
        return d.num_microbatches * tm.exposed(dp / d.num_microbatches, slot, overlap)

    def time_lower_bound(self) -> float:
        """Never above `time(k).step`: the step time grows with the slot (the pipeline term rises by at
        least m per unit, exposed DP falls by at most m), so the smallest slot gives a bound."""
        if not self._time_ready:
            self._prepare_time()
        slot = min(max(self.stage[rc]) for rc in self.o.recompute) + self.p2p
        pipe = tm.pipeline_seconds(self.d.num_microbatches, self.d.pp, self.d.vpp, slot)[0]
        best = pipe + min(self._dp_exposed(z, slot) + min(self._optimizer_seconds(z, off) for off in self.o.offload)
                          for z in self.o.zero_stages)
        return best * (1 - 1e-12)  # summation order differs from time(): keep a bound under rounding

    def step_seconds(self, k: Knobs) -> float:
        return self.time(k).step

    def time(self, k: Knobs) -> TimeEstimate:
        if not self._time_ready:
            self._prepare_time()
        d, o = self.d, self.o
        slot, off_act, i = self._slot(k.recompute, k.offload)
        pipe, bubble = tm.pipeline_seconds(d.num_microbatches, d.pp, d.vpp, slot)
        dp_exposed = self._dp_exposed(k.zero_stage, slot)
        opt = self._optimizer_seconds(k.zero_stage, k.offload)
        step = pipe + dp_exposed + opt
        extra, tp, ep, cp = self.parts[k.recompute][i]
        m = d.num_microbatches
        tokens = self.training.global_batch * self.training.seq_len
        mfu = self.model_flops / (step * d.accelerators * self.cluster.bf16_tflops * 1e12)
        return TimeEstimate(compute=m * self.compute_s[i], recompute=m * extra, tp_comm=m * tp, ep_comm=m * ep,
                            cp_comm=m * cp, pp_comm=m * self.p2p, bubble=bubble, dp_comm=dp_exposed,
                            optimizer=opt, offload=m * off_act, step=step, tokens_per_s=tokens / step,
                            mfu=mfu, model_flops=self.model_flops)
