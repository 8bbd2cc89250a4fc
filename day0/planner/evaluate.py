"""The cost model: memory per accelerator and time per step for one plan (degrees + memory knobs).

Contract: `PlanContext(costs, cluster, training, degrees, options)` precomputes everything that depends
only on the parallel degrees; `memory(knobs)` and `time(knobs)` are then cheap, pure and deterministic,
so the pruned search and the brute-force enumerator give bit-identical numbers for the same plan.
Every memory term comes from `memory`, every time term from `step_time` (the static bound in
`bounds` calls the same ones). Lower bounds (`time_lower_bound`, `memory_lower_bound`) never exceed
the value of any knob setting.
"""

from __future__ import annotations

from day0.planner import memory as mem
from day0.planner import step_time as st
from day0.planner import timing as tm
from day0.planner.inputs import GIB, ClusterFigures, PlannerOptions
from day0.planner.model import ModelCosts
from day0.planner.stages import rank_groups
from day0.planner.values import RECOMPUTES, Degrees, MemoryEstimate, MemoryKnobs, TimeEstimate
from day0.spec import TrainingSpec

__all__ = ["PlanContext"]


class PlanContext:
    """Everything about one degree tuple that does not depend on the memory knobs (computed lazily)."""

    def __init__(
        self, costs: ModelCosts, cluster: ClusterFigures, training: TrainingSpec, d: Degrees, options: PlannerOptions
    ):
        self.costs, self.cluster, self.training, self.d, self.o = costs, cluster, training, d, options
        prec = training.precision
        self.pb = mem.param_bytes(prec.compute, prec.master_weights, options.grad_dtype, options.optimizer_state_dtype)
        self.groups, self.layers_per_rank = rank_groups(
            costs, d.pipeline_parallel, d.virtual_pipeline_stages, training.seq_len
        )
        self.tokens = training.seq_len * d.micro_batch / d.context_parallel  # per rank, gathered over TP (SP)
        self.capacity = cluster.memory_bytes
        self._mem_ready = self._time_ready = False
        self._cache: dict[tuple, float] = {}

    # --- memory precomputation ------------------------------------------------------------------
    def _prepare_memory(self) -> None:
        c, d, o, s, groups = self.costs, self.d, self.o, self.training.seq_len, self.groups
        tp, pp, ep, etp = d.tensor_parallel, d.pipeline_parallel, d.expert_parallel, d.expert_tensor_parallel
        shards = [mem.rank_params(g.dense, g.replicated, g.expert, tp, ep, etp) for g in groups]
        self.dense, self.expert = [x[0] for x in shards], [x[1] for x in shards]
        self.embhead = [mem.embedding_head_params(c, tp, pp, g.has_embedding, g.has_head) for g in groups]
        self.max_unit_params = max(
            mem.zero3_unit_params(k.dense_params / tp, k.replicated_params, k.expert_params / (ep * etp))
            for k in c.kinds
        )
        flash, sp = o.flash_attention, o.sequence_parallel
        self.act = {
            rc: [self.tokens * mem.activation_bytes(g.act, rc, tp, etp, s, flash, sp) for g in groups]
            for rc in RECOMPUTES
        }
        per_kind = {
            rc: [mem.activation_bytes_per_token(k, rc, tp, etp, s, flash, sp) for k in c.kinds] for rc in RECOMPUTES
        }
        self.working = {
            rc: self.tokens * max(a - b for a, b in zip(per_kind["none"], per_kind[rc])) for rc in RECOMPUTES
        }
        self.inflight = [
            mem.inflight_microbatches(g.first_rank, pp, d.virtual_pipeline_stages, d.num_microbatches) for g in groups
        ]
        self.logits = [mem.logits_bytes(self.tokens, c.vocab, tp) if g.has_head else 0.0 for g in groups]
        tp_buf = 2 * self.tokens * c.hidden * 2 if tp > 1 else 0.0
        a2a_buf = 2 * self.tokens / tp * c.top_k * c.hidden * 2 if ep > 1 else 0.0
        self.comm_base = tp_buf + a2a_buf
        self.framework = o.framework_overhead_gib * GIB
        self.reserve = o.fragmentation_fraction * self.capacity
        self.host_capacity = self.cluster.host_memory_gib_per_accelerator * GIB
        self._mem_ready = True

    # --- memory -------------------------------------------------------------------------------
    def _group_memory(self, i: int, k: MemoryKnobs) -> MemoryEstimate:
        d, pb, z, off_opt = self.d, self.pb, k.zero_stage, "optimizer" in k.offload
        w1, g1, o1, h1 = mem.model_state_bytes(self.dense[i], d.dense_replicas, z, pb, off_opt)
        w2, g2, o2, h2 = mem.model_state_bytes(self.expert[i], d.expert_replicas, z, pb, off_opt)
        w3, g3, o3, h3 = mem.model_state_bytes(self.embhead[i], d.dense_replicas, z, pb, off_opt)
        per_mb = self.act[k.recompute][i]
        inflight = self.inflight[i]
        host = h1 + h2 + h3
        if "activations" in k.offload:  # keep the running and the next-prefetched micro-batch on device
            host += per_mb * max(0.0, inflight - 2)
            inflight = min(inflight, 2.0)
        acts = per_mb * inflight
        comm = self.comm_base + (mem.zero3_prefetch_bytes(self.max_unit_params, pb.weight) if z >= 3 else 0.0)
        w1 += mem.dualpipe_weight_bytes(w1 + w2 + w3, self.o.dualpipe)
        working = self.working[k.recompute]
        total = (
            w1
            + w2
            + g1
            + g2
            + o1
            + o2
            + w3
            + g3
            + o3
            + acts
            + working
            + self.logits[i]
            + comm
            + self.framework
            + self.reserve
        )
        return MemoryEstimate(
            self.groups[i].first_rank,
            w1 + w2,
            g1 + g2,
            o1 + o2,
            w3 + g3 + o3,
            acts,
            working,
            self.logits[i],
            comm,
            self.framework,
            self.reserve,
            total,
            self.capacity,
            inflight,
            per_mb,
            host,
            self.host_capacity,
        )

    def memory(self, k: MemoryKnobs) -> MemoryEstimate:
        """The pipeline rank with the highest total (the one that decides feasibility)."""
        if not self._mem_ready:
            self._prepare_memory()
        return max(
            (self._group_memory(i, k) for i in range(len(self.groups))), key=lambda m: (m.total_bytes, -m.peak_stage)
        )

    def memory_lower_bound(self) -> float:
        """max over ranks of the sum of each term's minimum over the allowed knobs (a relaxation)."""
        if not self._mem_ready:
            self._prepare_memory()
        o, pb, d = self.o, self.pb, self.d
        zmax = max(o.zero_stages)
        opt_off = any("optimizer" in off for off in o.offload)
        act_off = any("activations" in off for off in o.offload)
        best = 0.0
        for i in range(len(self.groups)):
            states = 0.0
            for params, shard in (
                (self.dense[i] + self.embhead[i], d.dense_replicas),
                (self.expert[i], d.expert_replicas),
            ):
                w, g, opt, _ = mem.model_state_bytes(params, shard, zmax, pb, opt_off)
                states += w + g + opt
            infl = min(self.inflight[i], 2.0) if act_off else self.inflight[i]
            acts = min(self.act[rc][i] * infl + self.working[rc] for rc in o.recompute)
            best = max(best, states + acts + self.logits[i] + self.comm_base + self.framework + self.reserve)
        return best

    # --- time precomputation ------------------------------------------------------------------
    def _prepare_time(self) -> None:
        if not self._mem_ready:
            self._prepare_memory()
        c, d, o, tr = self.costs, self.d, self.o, self.training
        self.rates = st.step_rates(c, self.cluster, tr.seq_len, tr.precision.compute, o, d)
        self.stage = {
            rc: [st.stage_seconds(g.work, rc, self.rates, tr.seq_len, d, o) for g in self.groups] for rc in RECOMPUTES
        }
        self.model_flops = st.model_flops_per_step(c, tr.global_batch, tr.seq_len)
        self.peak = st.gemm_peak_flops(self.cluster.hardware, tr.precision.compute)
        self._time_ready = True

    # --- time ---------------------------------------------------------------------------------
    def _dp_seconds(self, zero: int) -> float:
        key = ("dp", zero)
        if key not in self._cache:
            g = st.grad_reduce_bytes(self.o.comm, self.pb)
            self._cache[key] = max(
                st.dp_sync_seconds(
                    self.dense[i] + self.embhead[i],
                    self.expert[i],
                    zero,
                    g,
                    self.pb.weight,
                    self.d,
                    self.rates.dp_bandwidth,
                )
                for i in range(len(self.groups))
            )
        return self._cache[key]

    def _optimizer_seconds(self, zero: int, offload: str) -> float:
        key = ("opt", zero, offload)
        if key not in self._cache:
            params = max(
                st.optimizer_params(self.dense[i] + self.embhead[i], self.expert[i], zero, self.d)
                for i in range(len(self.groups))
            )
            per_param = st.optimizer_seconds_per_param(offload, self.pb, self.o)
            self._cache[key] = params * per_param + st.optimizer_launch_seconds(self.rates, self.o)
        return self._cache[key]

    def _slot(self, rc: str, offload: str) -> tuple[float, float, int]:
        """(slowest stage's time per micro-batch incl. p2p, activation-offload time in it, its group)."""
        worst, worst_off, which = -1.0, 0.0, 0
        for i, stage in enumerate(self.stage[rc]):
            off = (
                st.activation_offload_seconds(self.act[rc][i], stage.compute_s, self.o.host_bandwidth_gbps)
                if "activations" in offload
                else 0.0
            )
            if stage.slot_s + off > worst:
                worst, worst_off, which = stage.slot_s + off, off, i
        return worst + self.rates.p2p_s, worst_off, which

    def _dp_exposed(self, zero: int, slot: float) -> float:
        return st.dp_exposed_seconds(
            self._dp_seconds(zero), slot, zero, self.d.num_microbatches, self.o.comm.dp_overlap
        )

    def time_lower_bound(self) -> float:
        """Never above `time(k).step_s`: the step time grows with the slot (the pipeline term rises by at
        least m per unit, exposed DP falls by at most m), so the smallest slot gives a bound."""
        if not self._time_ready:
            self._prepare_time()
        d = self.d
        slot = min(max(x.slot_s for x in self.stage[rc]) for rc in self.o.recompute) + self.rates.p2p_s
        pipe = tm.pipeline_seconds(
            d.num_microbatches, d.pipeline_parallel, d.virtual_pipeline_stages, slot, self.o.dualpipe
        )[0]
        best = pipe + min(
            self._dp_exposed(z, slot) + min(self._optimizer_seconds(z, off) for off in self.o.offload)
            for z in self.o.zero_stages
        )
        return best * (1 - 1e-12)  # summation order differs from time(): keep a bound under rounding

    def time(self, k: MemoryKnobs) -> TimeEstimate:
        if not self._time_ready:
            self._prepare_time()
        d, tr = self.d, self.training
        slot, off_act, i = self._slot(k.recompute, k.offload)
        pipe, bubble = tm.pipeline_seconds(
            d.num_microbatches, d.pipeline_parallel, d.virtual_pipeline_stages, slot, self.o.dualpipe
        )
        dp_exposed = self._dp_exposed(k.zero_stage, slot)
        opt = self._optimizer_seconds(k.zero_stage, k.offload)
        step = pipe + dp_exposed + opt
        s, m = self.stage[k.recompute][i], d.num_microbatches
        return TimeEstimate(
            compute_s=m * s.compute_s,
            recompute_s=m * s.recompute_s,
            tp_comm_s=m * s.tp_comm_s,
            ep_comm_s=m * s.ep_comm_s,
            cp_comm_s=m * s.cp_comm_s,
            pp_comm_s=m * self.rates.p2p_s,
            bubble_s=bubble,
            dp_comm_exposed_s=dp_exposed,
            optimizer_s=opt,
            offload_s=m * off_act,
            step_s=step,
            tokens_per_s=tr.global_batch * tr.seq_len / step,
            mfu=st.mfu(self.model_flops, step, d.accelerators, self.peak),
            model_tflops_per_step=self.model_flops / 1e12,
        )
