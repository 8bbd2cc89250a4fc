"""The cost model: memory per accelerator and time per step for one plan (degrees + memory knobs).

Contract: `PlanContext(problem, degrees)` precomputes everything that depends
only on the parallel degrees; `memory(knobs)` and `time(knobs)` are then cheap, pure and deterministic,
so the pruned search and the brute-force enumerator give bit-identical numbers for the same plan.
`step_seconds(knobs)` and `fits(knobs)` are the same sums without building the estimates (what the
search calls per knob setting). Every memory term comes from `memory`, every time term from
`step_time` (the static bound in `bounds` calls the same ones). Lower bounds (`time_lower_bound`,
`memory_lower_bound`) never exceed the value of any knob setting. The memory half is
`plan_memory.MemoryContext`, which `PlanContext` extends with the step time.

Full recompute follows Megatron's methods (`options.recompute_method`, `recompute_num_layers` N):
`uniform` checkpoints the input of every group of N layers (N = 1: every layer's, the default) and
holds N layers' activations while one group is recomputed; `block` recomputes the first N layers of
each chunk and stores the others' activations whole.
"""

from __future__ import annotations

from collections.abc import Sequence

from day0.planner import step_time as st
from day0.planner import timing as tm
from day0.planner.plan_memory import MemoryContext
from day0.planner.rates import RateCache
from day0.planner.values import MemoryKnobs, TimeEstimate

__all__ = ["PlanContext"]


class PlanContext(MemoryContext):
    """Everything about one degree tuple that does not depend on the memory knobs (computed lazily): its
    memory (`MemoryContext`) and its step time."""

    # --- time precomputation ------------------------------------------------------------------
    def _prepare_time(self) -> None:
        if not self._mem_ready:
            self._prepare_memory()
        c, d, o, tr = self.costs, self.d, self.o, self.training
        cache = self._rate_cache or RateCache(c, self.cluster, tr.seq_len, tr.precision.compute, o)
        self.rates = cache.rates(d)
        self._time_ready = True

    def stage(self, rc: str) -> list[st.StageTime]:
        """Each group's stage time per micro-batch under recompute `rc`."""
        if rc not in self._stage:
            if not self._time_ready:
                self._prepare_time()
            seq, d, o = self.training.seq_len, self.d, self.o
            self._stage[rc] = [
                st.stage_seconds(g.work, rc, self.rates, seq, d, o, self._full_fraction(i))
                for i, g in enumerate(self.groups)
            ]
        return self._stage[rc]

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
                    self.rates.expert_dp_bandwidth,
                )
                for i in range(len(self.groups))
            )
        return self._cache[key]

    def _optimizer_params(self, zero: int) -> float:
        """Parameters the busiest rank's optimizer updates at this ZeRO stage."""
        params = self._opt_params.get(zero)
        if params is None:
            params = self._opt_params[zero] = max(
                st.optimizer_params(self.dense[i] + self.embhead[i], self.expert[i], zero, self.d)
                for i in range(len(self.groups))
            )
        return params

    def _optimizer_seconds(self, zero: int, offload: str) -> float:
        key = (zero, offload)
        hit = self._opt.get(key)
        if hit is None:
            per_param = st.optimizer_seconds_per_param(offload, self.pb, self.o)
            hit = self._opt[key] = self._optimizer_params(zero) * per_param + self._optimizer_launch()
        return hit

    def _optimizer_launch(self) -> float:
        if self._launch is None:
            self._launch = st.optimizer_launch_seconds(self.rates, self.o)
        return self._launch

    def _slot(self, rc: str, offload: str) -> tuple[float, float, int]:
        """(slowest stage's time per micro-batch incl. p2p, activation-offload time in it, its group)."""
        key = ("slot", rc, "activations" in offload)
        hit = self._slots.get(key)
        if hit is None:
            hit = self._slots[key] = self._slowest(rc, offload)
        return hit

    def _slowest(self, rc: str, offload: str) -> tuple[float, float, int]:
        worst, worst_off, which = -1.0, 0.0, 0
        acts = self.act(rc)
        for i, stage in enumerate(self.stage(rc)):
            off = (
                st.activation_offload_seconds(acts[i], stage.compute_s, self.o.host_bandwidth_gbps)
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
        least m per unit, exposed DP falls by at most m), so the least slot any recompute mode can reach
        (`slot_floor`) gives a bound."""
        if not self._time_ready:
            self._prepare_time()
        d, o, r = self.d, self.o, self.rates
        slot = (
            min(
                max(st.slot_floor(x, o.comm, o.overlap_sm_fraction, r.launch_async) for x in self.stage(rc))
                for rc in st.floor_modes(o.recompute)
            )
            + r.p2p_s
        )
        pipe = tm.pipeline_seconds(
            d.num_microbatches, d.pipeline_parallel, d.virtual_pipeline_stages, slot, self.o.dualpipe
        )[0]
        # the cheapest offload's update: params x its per-parameter time (the same min as over `_optimizer_seconds`)
        per_param = min(st.optimizer_seconds_per_param(off, self.pb, o) for off in o.offload)
        launch = self._optimizer_launch()
        best = pipe + min(
            self._dp_exposed(z, slot) + (self._optimizer_params(z) * per_param + launch)
            for z in st.least_zero_stages(o.zero_stages, st.grad_reduce_bytes(o.comm, self.pb), self.pb.weight)
        )
        return best * (1 - 1e-12)  # summation order differs from time(): keep a bound under rounding

    def _parts(self, k: MemoryKnobs) -> tuple[float, float, int, float, float, float, float]:
        """(step, slot, its group, activation offload per slot, bubble, exposed DP, optimizer)."""
        if not self._time_ready:
            self._prepare_time()
        d = self.d
        slot, off_act, i = self._slot(k.recompute, k.offload)
        pipe, bubble = tm.pipeline_seconds(
            d.num_microbatches, d.pipeline_parallel, d.virtual_pipeline_stages, slot, self.o.dualpipe
        )
        dp_exposed = self._dp_exposed(k.zero_stage, slot)
        opt = self._optimizer_seconds(k.zero_stage, k.offload)
        return pipe + dp_exposed + opt, slot, i, off_act, bubble, dp_exposed, opt

    def step_seconds(self, k: MemoryKnobs) -> float:
        """`time(k).step_s`, without building the estimate."""
        return self._parts(k)[0]

    def step_table(self, knobs: Sequence[MemoryKnobs]) -> list[float]:
        """`step_seconds` of each knob setting, the shared parts computed once (the search's inner loop:
        local lookups rather than method calls per setting)."""
        if not self._time_ready:
            self._prepare_time()
        d, dualpipe = self.d, self.o.dualpipe
        m, pp, vpp = d.num_microbatches, d.pipeline_parallel, d.virtual_pipeline_stages
        pipes: dict[tuple, tuple[float, float]] = {}
        exposed: dict[tuple, float] = {}
        opt, optimizer_seconds = self._opt, self._optimizer_seconds
        out = []
        for k in knobs:
            z, off = k.zero_stage, k.offload
            skey = (k.recompute, "activations" in off)
            hit = pipes.get(skey)
            if hit is None:
                slot = self._slot(k.recompute, off)[0]
                hit = pipes[skey] = (tm.pipeline_seconds(m, pp, vpp, slot, dualpipe)[0], slot)
            dkey = (z, skey)
            dp = exposed.get(dkey)
            if dp is None:
                dp = exposed[dkey] = self._dp_exposed(z, hit[1])
            o = opt.get((z, off))
            out.append(hit[0] + dp + (o if o is not None else optimizer_seconds(z, off)))
        return out

    def time(self, k: MemoryKnobs) -> TimeEstimate:
        step, _slot, i, off_act, bubble, dp_exposed, opt = self._parts(k)
        d, tr = self.d, self.training
        s, m = self.stage(k.recompute)[i], d.num_microbatches
        flops = st.model_flops_per_step(self.costs, tr.global_batch, tr.seq_len)
        peak = st.gemm_peak_flops(self.cluster.hardware, tr.precision.compute)
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
            mfu=st.mfu(flops, step, d.accelerators, peak),
            model_tflops_per_step=flops / 1e12,
            tp_comm_exposed_s=m * s.tp_exposed_s,
            ep_comm_exposed_s=m * s.ep_exposed_s,
            cp_comm_exposed_s=m * s.cp_exposed_s,
            host_dispatch_s=m * s.host_s,
            host_dispatch_exposed_s=m * s.launch_s,
            dp_comm_s=self._dp_seconds(k.zero_stage),
        )
