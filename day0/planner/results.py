"""Step-3 results: ranked plans with memory and time breakdowns, the infeasibility report, the chosen
plan as YAML in the pipeline's vocabulary (`parallel:`, `memory:`, `precision:`).

Contract: pydantic models, JSON-serialisable; bytes are plain bytes, times seconds. `PlanReport.to_yaml()`
writes the best plan (or an infeasibility note); `to_markdown()` is the human report.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, Field

from day0.planner.evaluate import Knobs, MemoryEstimate, PlanContext, TimeEstimate
from day0.planner.inputs import GIB, ClusterFigures, PlannerOptions
from day0.spec import TrainingSpec

__all__ = ["Infeasibility", "MemoryBreakdown", "MemoryKnobs", "ParallelDegrees", "Plan", "PlanReport",
           "TimeBreakdown", "make_plan"]


class ParallelDegrees(BaseModel):
    tensor_parallel: int
    pipeline_parallel: int
    virtual_pipeline_stages: int
    expert_parallel: int
    expert_tensor_parallel: int
    context_parallel: int
    data_parallel: int
    micro_batch: int
    num_microbatches: int
    accelerators: int


class MemoryKnobs(BaseModel):
    recompute: str
    zero_stage: int
    offload: str


class MemoryBreakdown(BaseModel):
    """Per accelerator on the peak pipeline stage, bytes. The terms sum to `total_bytes`."""

    peak_stage: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_states_bytes: float
    embedding_head_bytes: float = Field(description="Weights+grads+optimizer of embedding/head on this stage.")
    activations_bytes: float = Field(description="Stored activations of all in-flight micro-batches.")
    recompute_working_bytes: float
    logits_bytes: float
    comm_buffers_bytes: float
    framework_bytes: float
    fragmentation_reserve_bytes: float
    total_bytes: float
    capacity_bytes: float
    inflight_microbatches: float
    activations_per_microbatch_bytes: float
    host_offload_bytes: float


class TimeBreakdown(BaseModel):
    """Seconds per optimizer step; comm terms on the slowest stage, before overlap unless marked exposed."""

    compute_s: float
    recompute_s: float
    tp_comm_s: float
    ep_comm_s: float
    cp_comm_s: float
    pp_comm_s: float
    bubble_s: float
    dp_comm_exposed_s: float
    optimizer_s: float
    offload_s: float
    step_s: float
    tokens_per_s: float
    mfu: float
    model_tflops_per_step: float


class Plan(BaseModel):
    rank: int = 0
    parallel: ParallelDegrees
    memory_knobs: MemoryKnobs
    precision: dict[str, str]
    memory: MemoryBreakdown
    time: TimeBreakdown
    feasible: bool
    reason: str | None = None
    layers_per_stage: list[int]

    def to_yaml_dict(self) -> dict[str, Any]:
        return {"parallel": self.parallel.model_dump(), "memory": self.memory_knobs.model_dump(),
                "precision": dict(self.precision),
                "estimate": {"memory_gib": round(self.memory.total_bytes / GIB, 2),
                             "step_s": round(self.time.step_s, 4), "tokens_per_s": round(self.time.tokens_per_s),
                             "mfu": round(self.time.mfu, 4)}}


class Infeasibility(BaseModel):
    reason: str
    count: int
    min_memory_gib: float | None = None


class PlanReport(BaseModel):
    model: str
    params_total: int
    params_active: int
    cluster: ClusterFigures
    training: TrainingSpec
    feasible: bool
    message: str
    plans: list[Plan]
    closest_infeasible: list[Plan] = Field(default_factory=list,
                                           description="When nothing fits: the leanest setups, with why not.")
    infeasible: list[Infeasibility]
    min_accelerators: int | None = None
    tuples_considered: int
    configurations_evaluated: int
    search_seconds: float
    notes: list[str] = Field(default_factory=list)
    options: PlannerOptions = Field(default_factory=PlannerOptions, description="The assumptions used (last: "
                                    "duck-typed readers find the best plan's knobs first).")

    @property
    def best(self) -> Plan | None:
        return self.plans[0] if self.plans else None

    def files(self) -> dict[str, bytes]:
        """plan.yaml, and memory.png: each memory term of the top three plans (the report embeds it)."""
        out = {"plan.yaml": self.to_yaml().encode()}
        if self.plans:
            from day0.plots import grouped_bars

            terms = [t for t in _MEMORY_TERMS if any(getattr(p.memory, t) for p in self.plans[:3])]
            out["memory.png"] = grouped_bars(
                f"{self.model}: memory per accelerator by term (capacity {self.cluster.memory_gib:g} GiB)",
                [t.removesuffix("_bytes").replace("_", " ") for t in terms],
                {f"#{p.rank} TP{p.parallel.tensor_parallel} PP{p.parallel.pipeline_parallel} "
                 f"EP{p.parallel.expert_parallel} {p.memory_knobs.recompute}": [getattr(p.memory, t) / GIB for t in terms]
                 for p in self.plans[:3]}, "GiB")
        return out

    def to_yaml(self) -> str:
        if self.best is None:
            return yaml.safe_dump({"feasible": False, "reason": self.message,
                                   "min_accelerators": self.min_accelerators}, sort_keys=False)
        return f"# day0 plan for {self.model} on {self.cluster.accelerators} accelerators\n" + \
            yaml.safe_dump(self.best.to_yaml_dict(), sort_keys=False)

    def table(self, top: int = 10) -> str:
        head = ("| # | TP | PP | VPP | EP | ETP | CP | DP | mb | recompute | ZeRO | offload | GiB | step s | "
                "tokens/s | MFU |\n|---" + "|---" * 15 + "|")
        rows = []
        for p in self.plans[:top]:
            d, k = p.parallel, p.memory_knobs
            rows.append(f"| {p.rank} | {d.tensor_parallel} | {d.pipeline_parallel} | {d.virtual_pipeline_stages} | "
                        f"{d.expert_parallel} | {d.expert_tensor_parallel} | {d.context_parallel} | {d.data_parallel} | "
                        f"{d.micro_batch} | {k.recompute} | {k.zero_stage} | {k.offload} | "
                        f"{p.memory.total_bytes / GIB:.1f} | {p.time.step_s:.2f} | {p.time.tokens_per_s:,.0f} | "
                        f"{p.time.mfu:.1%} |")
        return "\n".join([head, *rows])

    def to_markdown(self, top: int = 10) -> str:
        c = self.cluster
        lines = [f"# Step 3: parallel plan for `{self.model}`", "",
                 f"- cluster: {c.accelerators} accelerators ({c.per_node}/node, {c.memory_gib:g} GiB, "
                 f"{c.bf16_tflops:g} bf16 TFLOP/s, {c.intra_node_bandwidth_gbps:g}/{c.inter_node_bandwidth_gbps:g} "
                 "GB/s intra/inter-node)",
                 f"- training: seq {self.training.seq_len}, global batch {self.training.global_batch}, "
                 f"compute {self.training.precision.compute}, master {self.training.precision.master_weights}",
                 f"- search: {self.tuples_considered} degree tuples, {self.configurations_evaluated} configurations "
                 f"evaluated in {self.search_seconds:.2f} s", "", f"**{self.message}**", ""]
        if self.plans:
            lines += [self.table(top), "", _memory_section(self.plans[0]), "",
                      "![memory per accelerator by term](memory.png)", "", _time_section(self.plans[0])]
        if self.infeasible:
            lines += ["", "## Rejected", "", "| reason | tuples |", "|---|---|"]
            lines += [f"| {i.reason} | {i.count} |" for i in self.infeasible[:10]]
        o = self.options
        lines += ["", f"- assumptions: GEMMs at {o.compute_efficiency:.0%} of peak (saturating with rows), "
                  f"{'FlashAttention' if o.flash_attention else 'stored attention scores'}, fused norm/SwiGLU kernels, "
                  f"TP with sequence parallelism, {o.grad_dtype} gradients, {o.optimizer_state_dtype} Adam moments, "
                  f"{o.fragmentation_fraction:.0%} fragmentation reserve + {o.framework_overhead_gib:g} GiB runtime, "
                  f"1F1B / interleaved 1F1B pipeline"]
        lines += [f"- note: {n}" for n in [*self.cluster.notes, *self.notes]]
        return "\n".join(lines) + "\n"


_MEMORY_TERMS = [name for name in MemoryBreakdown.model_fields if name.endswith("_bytes") and name not in (
    "total_bytes", "capacity_bytes", "activations_per_microbatch_bytes", "host_offload_bytes")]


def _memory_section(p: Plan) -> str:
    m = p.memory
    rows = [(name.removesuffix("_bytes").replace("_", " "), getattr(m, name)) for name in _MEMORY_TERMS]
    body = "\n".join(f"| {n} | {v / GIB:.2f} |" for n, v in rows)
    return (f"## Memory of the best plan (stage {m.peak_stage}, {m.inflight_microbatches:g} micro-batches in flight)"
            f"\n\n| term | GiB |\n|---|---|\n{body}\n| **total** | **{m.total_bytes / GIB:.2f}** of "
            f"{m.capacity_bytes / GIB:.0f} |")


def _time_section(p: Plan) -> str:
    t = p.time
    rows = [(n.removesuffix("_s").replace("_", " "), getattr(t, n)) for n in TimeBreakdown.model_fields
            if n.endswith("_s") and n != "tokens_per_s"]
    body = "\n".join(f"| {n} | {v:.3f} |" for n, v in rows)
    return f"## Time of the best plan\n\n| term | s |\n|---|---|\n{body}\n\nMFU {t.mfu:.1%}, {t.tokens_per_s:,.0f} tokens/s"


def make_plan(ctx: PlanContext, knobs: Knobs, m: MemoryEstimate, t: TimeEstimate, reason: str | None = None) -> Plan:
    d = ctx.d
    prec = ctx.training.precision
    return Plan(
        parallel=ParallelDegrees(tensor_parallel=d.tp, pipeline_parallel=d.pp, virtual_pipeline_stages=d.vpp,
                                 expert_parallel=d.ep, expert_tensor_parallel=d.etp, context_parallel=d.cp,
                                 data_parallel=d.dp, micro_batch=d.micro_batch, num_microbatches=d.num_microbatches,
                                 accelerators=d.accelerators),
        memory_knobs=MemoryKnobs(recompute=knobs.recompute, zero_stage=knobs.zero_stage, offload=knobs.offload),
        precision={"master_weights": prec.master_weights, "compute": prec.compute},
        memory=MemoryBreakdown(
            peak_stage=m.rank, weights_bytes=m.weights, gradients_bytes=m.gradients,
            optimizer_states_bytes=m.optimizer_states, embedding_head_bytes=m.embedding_head,
            activations_bytes=m.activations, recompute_working_bytes=m.recompute_working, logits_bytes=m.logits,
            comm_buffers_bytes=m.comm_buffers, framework_bytes=m.framework,
            fragmentation_reserve_bytes=m.fragmentation_reserve, total_bytes=m.total, capacity_bytes=m.capacity,
            inflight_microbatches=m.inflight_microbatches, activations_per_microbatch_bytes=m.activations_per_microbatch,
            host_offload_bytes=m.host),
        time=TimeBreakdown(compute_s=t.compute, recompute_s=t.recompute, tp_comm_s=t.tp_comm, ep_comm_s=t.ep_comm,
                           cp_comm_s=t.cp_comm, pp_comm_s=t.pp_comm, bubble_s=t.bubble, dp_comm_exposed_s=t.dp_comm,
                           optimizer_s=t.optimizer, offload_s=t.offload, step_s=t.step, tokens_per_s=t.tokens_per_s,
                           mfu=t.mfu, model_tflops_per_step=t.model_flops / 1e12),
        feasible=m.feasible and reason is None, reason=reason,
        layers_per_stage=list(ctx.layers_per_rank))
