"""The memory half of the cost model for one degree tuple: `MemoryContext`, which `evaluate.PlanContext`
extends with the step time.

Contract: as `evaluate`'s: everything that depends only on the degrees is computed once (lazily), each
knob setting's memory is then a few additions; `memory(k)` is the rank with the highest total, `fits(k)`
its feasibility without building the estimate, `memory_lower_bound()` never above any setting's total.
Activations and the recompute working set are shared across the tuples of one search (`RateCache.memo`:
they depend on PP, VPP, TP, expert-TP and the tokens per rank, not on EP or DP).
"""

from __future__ import annotations

import math

from day0.planner import memory as mem
from day0.planner import step_time as st
from day0.planner.inputs import GIB
from day0.planner.problem import PlanningProblem
from day0.planner.rates import RateCache
from day0.planner.stages import rank_groups
from day0.planner.values import Degrees, MemoryEstimate, MemoryKnobs

__all__ = ["MemoryContext"]


class MemoryContext:
    """Everything about one degree tuple's memory that does not depend on the memory knobs."""

    def __init__(self, problem: PlanningProblem, d: Degrees, rates: RateCache | None = None):
        self.problem, self.d, self._rate_cache = problem, d, rates
        self.costs, self.cluster, self.training = problem.costs, problem.cluster, problem.training
        self.o = options = problem.options
        training = self.training
        prec = training.precision
        self.pb = mem.param_bytes(prec.compute, prec.master_weights, options.grad_dtype, options.optimizer_state_dtype)
        self.groups, self.layers_per_rank = rank_groups(
            self.costs, d.pipeline_parallel, d.virtual_pipeline_stages, training.seq_len
        )
        self.tokens = training.seq_len * d.micro_batch / d.context_parallel  # per rank, gathered over TP (SP)
        self.capacity = self.cluster.memory_bytes
        self._mem_ready = self._time_ready = False
        self._cache: dict[tuple, float] = {}
        self._act: dict[str, list[float]] = {}
        self._working: dict[str, float] = {}
        self._stage: dict[str, list[st.StageTime]] = {}
        self._slots: dict[tuple, tuple[float, float, int]] = {}
        self._state_cache: dict[tuple, tuple[float, ...]] = {}
        self._opt: dict[tuple[int, str], float] = {}
        self._opt_params: dict[int, float] = {}
        self._launch: float | None = None

    # --- memory precomputation ------------------------------------------------------------------
    def _prepare_memory(self) -> None:
        c, d, o, groups = self.costs, self.d, self.o, self.groups
        tp, pp, ep, etp = d.tensor_parallel, d.pipeline_parallel, d.expert_parallel, d.expert_tensor_parallel
        shards = [mem.rank_params(g.dense, g.replicated, g.expert, tp, ep, etp) for g in groups]
        self.dense, self.expert = [x[0] for x in shards], [x[1] for x in shards]
        self.embhead = [mem.embedding_head_params(c, tp, pp, g.has_embedding, g.has_head) for g in groups]
        self.max_unit_params = max(
            mem.zero3_unit_params(k.dense_params / tp, k.replicated_params, k.expert_params / (ep * etp))
            for k in c.kinds
        )
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

    def _full_fraction(self, i: int) -> float:
        """Share of group i's layers that full recompute recomputes (below 1 only for the block method)."""
        o = self.o
        if o.recompute_method != "block":
            return 1.0
        layers = self.layers_per_rank[self.groups[i].first_rank]
        return min(1.0, o.recompute_num_layers * self.d.virtual_pipeline_stages / max(layers, 1))

    def _shared(self, key: tuple) -> object | None:
        """A value another tuple of the same search computed (activations depend on PP, VPP, TP, expert-TP
        and the tokens, not on EP or DP)."""
        return self._rate_cache.memo.get(key) if self._rate_cache is not None else None

    def _share(self, key: tuple, value: object) -> None:
        if self._rate_cache is not None:
            self._rate_cache.memo[key] = value

    def act(self, rc: str) -> list[float]:
        """Stored activation bytes of one micro-batch on each group's rank, under recompute `rc`."""
        d = self.d
        key = (
            "act",
            rc,
            d.pipeline_parallel,
            d.virtual_pipeline_stages,
            d.tensor_parallel,
            d.expert_tensor_parallel,
            self.tokens,
        )
        if rc not in self._act and (shared := self._shared(key)) is not None:
            self._act[rc] = shared  # type: ignore[assignment]  # stored by this method: list[float]
        if rc not in self._act:
            o, d, s = self.o, self.d, self.training.seq_len
            tp, etp, flash, sp = d.tensor_parallel, d.expert_tensor_parallel, o.flash_attention, o.sequence_parallel
            per = [self.tokens * mem.activation_bytes(g.act, rc, tp, etp, s, flash, sp) for g in self.groups]
            if rc == "full" and o.recompute_method == "block":
                none = self.act("none")
                per = [f * a + (1 - f) * b for f, a, b in zip(map(self._full_fraction, range(len(per))), per, none)]
            elif rc == "full" and o.recompute_num_layers > 1:  # one checkpoint per group of N layers
                n = o.recompute_num_layers
                per = [
                    a * math.ceil(self.layers_per_rank[g.first_rank] / n) / max(self.layers_per_rank[g.first_rank], 1)
                    for a, g in zip(per, self.groups)
                ]
            self._act[rc] = per
            self._share(key, per)
        return self._act[rc]

    def working(self, rc: str) -> float:
        """Activations live while one recomputed unit runs again (N layers under uniform-N full recompute)."""
        key = ("working", rc, self.d.tensor_parallel, self.d.expert_tensor_parallel, self.tokens)
        if rc not in self._working and (shared := self._shared(key)) is not None:
            self._working[rc] = shared  # type: ignore[assignment]  # stored by this method: a float
        if rc not in self._working:
            o, d, s, c = self.o, self.d, self.training.seq_len, self.costs
            tp, etp, flash, sp = d.tensor_parallel, d.expert_tensor_parallel, o.flash_attention, o.sequence_parallel
            gap = max(
                mem.activation_bytes_per_token(k, "none", tp, etp, s, flash, sp)
                - mem.activation_bytes_per_token(k, rc, tp, etp, s, flash, sp)
                for k in c.kinds
            )
            units = o.recompute_num_layers if rc == "full" and o.recompute_method == "uniform" else 1
            self._working[rc] = self.tokens * gap * units
            self._share(key, self._working[rc])
        return self._working[rc]

    # --- memory -------------------------------------------------------------------------------
    def _states(self, i: int, k: MemoryKnobs) -> tuple[float, ...]:
        key = (i, k.zero_stage, "optimizer" in k.offload)
        hit = self._state_cache.get(key)
        if hit is None:
            hit = self._state_cache[key] = self._model_states(i, k.zero_stage, key[2])
        return hit

    def _model_states(self, i: int, z: int, off_opt: bool) -> tuple[float, ...]:
        """(weights, grads, optimizer on device, embedding+head, host) of group i's model states."""
        d, pb = self.d, self.pb
        w1, g1, o1, h1 = mem.model_state_bytes(self.dense[i], d.dense_replicas, z, pb, off_opt)
        w2, g2, o2, h2 = mem.model_state_bytes(self.expert[i], d.expert_replicas, z, pb, off_opt)
        w3, g3, o3, h3 = mem.model_state_bytes(self.embhead[i], d.dense_replicas, z, pb, off_opt)
        w1 += mem.dualpipe_weight_bytes(w1 + w2 + w3, self.o.dualpipe)
        return w1 + w2, g1 + g2, o1 + o2, w3 + g3 + o3, h1 + h2 + h3

    def _group_terms(self, i: int, k: MemoryKnobs) -> tuple[float, ...]:
        """(weights, grads, optimizer, embedding+head, activations, working, comm, host, in flight, per
        micro-batch, total) of group i's rank."""
        weights, grads, optim, embhead, host = self._states(i, k)
        per_mb, inflight = self.act(k.recompute)[i], self.inflight[i]
        if "activations" in k.offload:  # keep the running and the next-prefetched micro-batch on device
            host += per_mb * max(0.0, inflight - 2)
            inflight = min(inflight, 2.0)
        acts, working = per_mb * inflight, self.working(k.recompute)
        zero3 = mem.zero3_prefetch_bytes(self.max_unit_params, self.pb.weight) if k.zero_stage >= 3 else 0.0
        comm = self.comm_base + zero3
        total = (
            weights + grads + optim + embhead + acts + working + self.logits[i] + comm + self.framework + self.reserve
        )
        return weights, grads, optim, embhead, acts, working, comm, host, inflight, per_mb, total

    def _peak_group(self, k: MemoryKnobs) -> tuple[int, tuple[float, ...]]:
        """The group whose rank holds the most (ties: the earliest stage) and its terms."""
        if not self._mem_ready:
            self._prepare_memory()
        terms = [self._group_terms(i, k) for i in range(len(self.groups))]
        i = max(range(len(terms)), key=lambda j: (terms[j][-1], -self.groups[j].first_rank))
        return i, terms[i]

    def memory(self, k: MemoryKnobs) -> MemoryEstimate:
        """The pipeline rank with the highest total (the one that decides feasibility)."""
        i, (weights, grads, optim, embhead, acts, working, comm, host, inflight, per_mb, total) = self._peak_group(k)
        return MemoryEstimate(
            self.groups[i].first_rank,
            weights,
            grads,
            optim,
            embhead,
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

    def fits(self, k: MemoryKnobs) -> bool:
        """`memory(k).feasible`, without building the estimate (the search calls it per knob setting)."""
        _i, terms = self._peak_group(k)
        return terms[-1] <= self.capacity and terms[7] <= self.host_capacity

    def memory_lower_bound(self) -> float:
        """max over ranks of the sum of each term's minimum over the allowed knobs (a relaxation)."""
        if not self._mem_ready:
            self._prepare_memory()
        o, pb, d = self.o, self.pb, self.d
        zmax = max(o.zero_stages)
        opt_off = any("optimizer" in off for off in o.offload)
        act_off = any("activations" in off for off in o.offload)
        acts_by_rc = {rc: self.act(rc) for rc in o.recompute}
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
            acts = min(acts_by_rc[rc][i] * infl + self.working(rc) for rc in o.recompute)
            best = max(best, states + acts + self.logits[i] + self.comm_base + self.framework + self.reserve)
        return best
