"""Step 4: memory and communication techniques for a chosen plan, each with its estimated effect.

Contract: `choose_optimizations` is pure. For the plan's parallel degrees it (1) turns on each
communication technique that shortens the step (overlaps always; bf16 gradient reduction when it saves
>1% of the step; fp8 MoE dispatch only when training already computes in fp8, as DeepSeek-V3 sec. 3.3
does), then (2) re-picks recompute / ZeRO stage / offload for the fastest setting that fits. Every
alternative of every technique is reported against the final choice: memory saved and time cost.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, Field

from day0.analysis.structure import ModelStructure
from day0.planner.evaluate import Degrees, Knobs, PlanContext
from day0.planner.inputs import GIB, ClusterFigures, CommSettings, PlannerOptions
from day0.planner.model import model_costs
from day0.planner.results import Plan, make_plan
from day0.planner.search import _best_knobs, knob_settings
from day0.spec import TrainingSpec

__all__ = ["OptimizationReport", "TechniqueChoice", "TechniqueOption", "choose_optimizations"]

_MIN_GAIN = 0.01  # a lossy technique must save at least 1% of the step


class TechniqueOption(BaseModel):
    value: str
    feasible: bool
    memory_bytes: float
    memory_saved_bytes: float  # against the chosen value; negative = uses more
    step_s: float
    time_cost_s: float         # against the chosen value; negative = faster


class TechniqueChoice(BaseModel):
    technique: str
    chosen: str
    reason: str
    options: list[TechniqueOption]


class OptimizationReport(BaseModel):
    model: str
    plan: Plan | None = Field(description="The plan with the chosen knobs; None when step 3 found no plan.")
    comm: CommSettings
    techniques: list[TechniqueChoice]
    step_before_s: float
    step_after_s: float
    memory_before_bytes: float
    memory_after_bytes: float
    skipped_reason: str | None = None

    @classmethod
    def skipped(cls, model: str, reason: str) -> OptimizationReport:
        return cls(model=model, plan=None, comm=CommSettings(), techniques=[], step_before_s=0, step_after_s=0,
                   memory_before_bytes=0, memory_after_bytes=0, skipped_reason=f"no feasible plan: {reason}")

    def files(self) -> dict[str, bytes]:
        return {"optimized-plan.yaml": self.to_yaml().encode()}

    def to_yaml_dict(self) -> dict[str, Any]:
        if self.plan is None:
            return {"feasible": False, "reason": self.skipped_reason}
        out = self.plan.to_yaml_dict()
        out["communication"] = self.comm.model_dump()
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_yaml_dict(), sort_keys=False)

    def to_markdown(self) -> str:
        if self.plan is None:
            return f"# Step 4: optimisations for `{self.model}`\n\nSkipped: {self.skipped_reason}\n"
        lines = [f"# Step 4: optimisations for `{self.model}`", "",
                 f"- step time {self.step_before_s:.3f} s -> **{self.step_after_s:.3f} s**; memory "
                 f"{self.memory_before_bytes / GIB:.1f} -> **{self.memory_after_bytes / GIB:.1f} GiB** per accelerator",
                 "", "| technique | chosen | why | alternatives (memory saved GiB / time cost s) |", "|---|---|---|---|"]
        for t in self.techniques:
            alts = "; ".join(f"{o.value}: {o.memory_saved_bytes / GIB:+.1f} / {o.time_cost_s:+.3f}"
                             + ("" if o.feasible else " (does not fit)") for o in t.options if o.value != t.chosen)
            lines.append(f"| {t.technique} | {t.chosen} | {t.reason} | {alts or '-'} |")
        return "\n".join([*lines, "", "```yaml", self.to_yaml().rstrip(), "```"]) + "\n"


def _degrees(plan: Plan) -> Degrees:
    p = plan.parallel
    return Degrees(p.tensor_parallel, p.pipeline_parallel, p.virtual_pipeline_stages, p.context_parallel,
                   p.expert_parallel, p.expert_tensor_parallel, p.data_parallel, p.micro_batch, p.num_microbatches)


def _ctx(structure: ModelStructure, cluster: ClusterFigures, training: TrainingSpec, d: Degrees,
         options: PlannerOptions, comm: CommSettings) -> PlanContext:
    return PlanContext(model_costs(structure), cluster, training, d, options.model_copy(update={"comm": comm}))


def _comm_candidates(d: Degrees, training: TrainingSpec, options: PlannerOptions, moe: bool) -> list[tuple[str, str, dict]]:
    """(technique, value, CommSettings update) for the techniques that apply to these degrees."""
    out = [("dp overlap", "on", {"dp_overlap": True})] if d.dp * d.cp > 1 else []
    if d.tp > 1:
        out.append(("tp overlap", "on", {"tp_overlap": True}))
    if moe and d.ep > 1:
        out.append(("ep overlap", "on", {"ep_overlap": True}))
        out.append(("dispatch dtype", "fp8", {"dispatch_dtype": "fp8"}))
    if options.grad_dtype == "fp32" and d.dp * d.cp > 1:
        out.append(("gradient reduce dtype", "bf16", {"grad_reduce_dtype": "bf16"}))
    return out


def choose_optimizations(structure: ModelStructure, cluster: ClusterFigures, training: TrainingSpec, plan: Plan,
                         options: PlannerOptions | None = None) -> OptimizationReport:
    options = options or PlannerOptions()
    d, knobs_all = _degrees(plan), knob_settings(options)
    base_knobs = Knobs(plan.memory_knobs.zero_stage, plan.memory_knobs.recompute, plan.memory_knobs.offload)
    base = _ctx(structure, cluster, training, d, options, options.comm)
    before_t, before_m = base.time(base_knobs).step, base.memory(base_knobs).total
    comm, reasons = options.comm, {}
    for technique, value, update in _comm_candidates(d, training, options, structure.moe is not None):
        trial = comm.model_copy(update=update)
        t_new = _ctx(structure, cluster, training, d, options, trial).time(base_knobs).step
        t_old = _ctx(structure, cluster, training, d, options, comm).time(base_knobs).step
        lossy = technique in ("dispatch dtype", "gradient reduce dtype")
        if technique == "dispatch dtype" and training.precision.compute != "fp8":
            reasons[technique] = "kept bf16: fp8 dispatch only with fp8 training (accuracy)"
        elif t_new < t_old * (1 - _MIN_GAIN if lossy else 1):
            comm, reasons[technique] = trial, f"saves {t_old - t_new:.3f} s per step"
        else:
            reasons[technique] = "no measurable gain for this plan"
    ctx = _ctx(structure, cluster, training, d, options, comm)
    found = _best_knobs(ctx, knobs_all)
    knobs = found[1] if found else base_knobs
    final = make_plan(ctx, knobs, ctx.memory(knobs), ctx.time(knobs)).model_copy(update={"rank": plan.rank})
    techniques = _memory_choices(ctx, knobs, options) + _comm_choices(structure, cluster, training, d, options, comm,
                                                                      knobs, reasons)
    return OptimizationReport(model=structure.model, plan=final, comm=comm, techniques=techniques,
                              step_before_s=before_t, step_after_s=final.time.step_s, memory_before_bytes=before_m,
                              memory_after_bytes=final.memory.total_bytes)


def _option(ctx: PlanContext, value: str, k: Knobs, ref_m: float, ref_t: float) -> TechniqueOption:
    m, t = ctx.memory(k), ctx.time(k).step
    return TechniqueOption(value=value, feasible=m.feasible, memory_bytes=m.total, memory_saved_bytes=ref_m - m.total,
                           step_s=t, time_cost_s=t - ref_t)


def _memory_choices(ctx: PlanContext, k: Knobs, options: PlannerOptions) -> list[TechniqueChoice]:
    ref_m, ref_t = ctx.memory(k).total, ctx.time(k).step
    why = "fastest setting that fits, jointly with the other memory knobs"
    return [
        TechniqueChoice(technique="recompute", chosen=k.recompute, reason=why, options=[
            _option(ctx, rc, Knobs(k.zero_stage, rc, k.offload), ref_m, ref_t) for rc in options.recompute]),
        TechniqueChoice(technique="zero stage", chosen=str(k.zero_stage), reason=why, options=[
            _option(ctx, str(z), Knobs(z, k.recompute, k.offload), ref_m, ref_t) for z in options.zero_stages]),
        TechniqueChoice(technique="offload", chosen=k.offload, reason=why, options=[
            _option(ctx, off, Knobs(k.zero_stage, k.recompute, off), ref_m, ref_t) for off in options.offload]),
    ]


def _comm_choices(structure: ModelStructure, cluster: ClusterFigures, training: TrainingSpec, d: Degrees,
                  options: PlannerOptions, comm: CommSettings, k: Knobs, reasons: dict[str, str]) -> list[TechniqueChoice]:
    ctx = _ctx(structure, cluster, training, d, options, comm)
    ref_m, ref_t = ctx.memory(k).total, ctx.time(k).step
    out = []
    for technique, value, update in _comm_candidates(d, training, options, structure.moe is not None):
        field = next(iter(update))
        current = getattr(comm, field)
        on = current == update[field]
        off_value = {"dp_overlap": False, "tp_overlap": False, "ep_overlap": False, "dispatch_dtype": "bf16",
                     "grad_reduce_dtype": None}[field]
        alt = comm.model_copy(update={field: off_value if on else update[field]})
        alt_ctx = _ctx(structure, cluster, training, d, options, alt)
        label_on, label_off = value, ("off" if isinstance(off_value, bool) else str(off_value or options.grad_dtype))
        opts = [TechniqueOption(value=label_on if on else label_off, feasible=True, memory_bytes=ref_m,
                                memory_saved_bytes=0.0, step_s=ref_t, time_cost_s=0.0),
                _option(alt_ctx, label_off if on else label_on, k, ref_m, ref_t)]
        reason = f"saves {opts[1].time_cost_s:.3f} s per step" if on else reasons.get(technique, "")
        out.append(TechniqueChoice(technique=technique, chosen=label_on if on else label_off, reason=reason,
                                   options=opts))
    return out
