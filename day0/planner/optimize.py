"""Step 4: memory and communication techniques for a chosen plan, each with its estimated effect.

Contract: `choose_optimizations` is pure. For the plan's parallel degrees it (1) turns on each
communication technique that shortens the step (overlaps always; bf16 gradient reduction when it saves
>1% of the step; fp8 MoE dispatch only when training already computes in fp8, as DeepSeek-V3 sec. 3.3
does), then (2) re-picks recompute / ZeRO stage / offload for the fastest setting that fits. Every
alternative of every technique is reported against the final choice: memory saved and time cost.
`OptimizationReport` is step 4's `StepResult`: `skipped` when step 3 found no plan, `fail` when the
optimized plan does not fit, else `pass` with the techniques chosen, their effect against not using
them, and the final memory per accelerator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from day0.core.result import Judgement, StepResult
from day0.planner.evaluate import PlanContext
from day0.planner.inputs import GIB, ClusterFigures, CommSettings, PlannerOptions, costs_for
from day0.planner.results import Plan, make_plan
from day0.planner.search import best_knobs
from day0.planner.space import knob_settings
from day0.planner.values import Degrees, MemoryKnobs
from day0.spec import TrainingSpec
from day0.yamlio import safe_dump

if TYPE_CHECKING:
    from day0.core.structure import ModelStructure

__all__ = ["OptimizationReport", "TechniqueChoice", "TechniqueOption", "choose_optimizations"]

_MIN_GAIN = 0.01  # a lossy technique must save at least 1% of the step


class TechniqueOption(BaseModel):
    value: str
    feasible: bool
    memory_bytes: float
    memory_saved_bytes: float  # against the chosen value; negative = uses more
    step_s: float
    time_cost_s: float  # against the chosen value; negative = faster


class TechniqueChoice(BaseModel):
    technique: str
    chosen: str
    baseline: str = Field(description="The value meaning 'technique not used' (recompute none, ZeRO 0, off).")
    reason: str
    options: list[TechniqueOption]

    def effect(self) -> TechniqueOption | None:
        """The baseline's option: its `memory_saved_bytes`/`time_cost_s` negated are the chosen value's
        effect against not using the technique; None when chosen is the baseline or it was not searched."""
        return next((o for o in self.options if o.value == self.baseline and o.value != self.chosen), None)


class OptimizationReport(StepResult):
    STEP = "optimize"

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
        return cls(
            model=model,
            plan=None,
            comm=CommSettings(),
            techniques=[],
            step_before_s=0,
            step_after_s=0,
            memory_before_bytes=0,
            memory_after_bytes=0,
            skipped_reason=f"no feasible plan: {reason}",
        )

    def judge(self) -> Judgement:
        if self.plan is None:
            return Judgement(verdict="skipped", reasons=[self.skipped_reason or "step 3 found no plan"])
        m = self.plan.memory
        used = [t for t in self.techniques if t.chosen != t.baseline]
        headline = {  # the first two are the scorecard's glance
            "techniques": ", ".join(f"{t.technique} {t.chosen}" for t in used) or "none needed",
            "memory per accelerator": f"{m.total_bytes / GIB:.1f} of {m.capacity_bytes / GIB:g} GiB",
        }
        for t in used:
            if (base := t.effect()) is not None:  # + 0.0: no "-0.0"
                saved, cost = round(-base.memory_saved_bytes / GIB, 1) + 0.0, round(-base.time_cost_s, 3) + 0.0
                headline[t.technique] = f"{t.chosen}: {saved:+.1f} GiB saved, {cost:+.3f} s per step vs {t.baseline}"
        headline["step time"] = f"{self.step_before_s:.3g} -> {self.step_after_s:.3g} s"
        if not self.plan.feasible:
            why = (
                f"needs {m.total_bytes / GIB:.1f} GiB per accelerator, {m.capacity_bytes / GIB:g} GiB available"
                if m.total_bytes > m.capacity_bytes
                else f"needs {m.host_offload_bytes / GIB:.1f} GiB host "
                f"memory per accelerator, {m.host_capacity_bytes / GIB:g} GiB available"
            )
            return Judgement(verdict="fail", headline=headline, reasons=[f"the optimized plan does not fit: {why}"])
        return Judgement(verdict="pass", headline=headline)

    def files(self) -> dict[str, bytes]:
        return {"optimized-plan.yaml": self.to_yaml().encode()}

    def to_yaml_dict(self) -> dict[str, Any]:
        if self.plan is None:
            return {"feasible": False, "reason": self.skipped_reason}
        out = self.plan.to_yaml_dict()
        out["communication"] = self.comm.model_dump()
        return out

    def to_yaml(self) -> str:
        return safe_dump(self.to_yaml_dict())

    def to_markdown(self) -> str:
        j = self.judge()
        lines = [
            f"# Step 4: optimisations for `{self.model}`: {j.verdict.upper()}",
            "",
            *[f"- **{j.verdict}**: {r}" for r in j.reasons],
        ]
        if self.plan is None:
            return "\n".join(lines) + "\n"
        lines += [
            f"- step time {self.step_before_s:.3f} s -> **{self.step_after_s:.3f} s**; memory "
            f"{self.memory_before_bytes / GIB:.1f} -> **{self.memory_after_bytes / GIB:.1f} GiB** per accelerator",
            "",
            "| technique | chosen | why | alternatives (memory saved GiB / time cost s) |",
            "|---|---|---|---|",
        ]
        for t in self.techniques:  # alternatives that do not fit first
            alts = sorted((o for o in t.options if o.value != t.chosen), key=lambda o: o.feasible)
            text = "; ".join(
                f"{o.value}: {o.memory_saved_bytes / GIB:+.1f} / {o.time_cost_s:+.3f}"
                + ("" if o.feasible else " (does not fit)")
                for o in alts
            )
            lines.append(f"| {t.technique} | {t.chosen} | {t.reason} | {text or '-'} |")
        return "\n".join([*lines, "", "```yaml", self.to_yaml().rstrip(), "```"]) + "\n"


def _ctx(
    structure: ModelStructure,
    cluster: ClusterFigures,
    training: TrainingSpec,
    d: Degrees,
    options: PlannerOptions,
    comm: CommSettings,
) -> PlanContext:
    costs = costs_for(structure, options, training.precision.compute)
    return PlanContext(costs, cluster, training, d, options.model_copy(update={"comm": comm}))


def _comm_candidates(
    d: Degrees, training: TrainingSpec, options: PlannerOptions, moe: bool
) -> list[tuple[str, str, dict]]:
    """(technique, value, CommSettings update) for the techniques that apply to these degrees."""
    replicated = d.dense_replicas > 1
    out: list[tuple[str, str, dict]] = [("dp overlap", "on", {"dp_overlap": True})] if replicated else []
    if d.tensor_parallel > 1:
        out.append(("tp overlap", "on", {"tp_overlap": True}))
    if moe and d.expert_parallel > 1:
        out.append(("ep overlap", "on", {"ep_overlap": True}))
        out.append(("dispatch dtype", "fp8", {"dispatch_dtype": "fp8"}))
    if options.grad_dtype == "fp32" and replicated:
        out.append(("gradient reduce dtype", "bf16", {"grad_reduce_dtype": "bf16"}))
    return out


def choose_optimizations(
    structure: ModelStructure,
    cluster: ClusterFigures,
    training: TrainingSpec,
    plan: Plan,
    options: PlannerOptions | None = None,
) -> OptimizationReport:
    options = options or PlannerOptions()
    d, knobs_all, base_knobs = plan.parallel, knob_settings(options), plan.memory_knobs
    base = _ctx(structure, cluster, training, d, options, options.comm)
    before_t, before_m = base.time(base_knobs).step_s, base.memory(base_knobs).total_bytes
    comm, reasons = options.comm, {}
    for technique, _value, update in _comm_candidates(d, training, options, structure.moe is not None):
        trial = comm.model_copy(update=update)
        t_new = _ctx(structure, cluster, training, d, options, trial).time(base_knobs).step_s
        t_old = _ctx(structure, cluster, training, d, options, comm).time(base_knobs).step_s
        lossy = technique in ("dispatch dtype", "gradient reduce dtype")
        if technique == "dispatch dtype" and training.precision.compute != "fp8":
            reasons[technique] = "kept bf16: fp8 dispatch only with fp8 training (accuracy)"
        elif t_new < t_old * (1 - _MIN_GAIN if lossy else 1):
            comm, reasons[technique] = trial, f"saves {t_old - t_new:.3f} s per step"
        else:
            reasons[technique] = "no measurable gain for this plan"
    ctx = _ctx(structure, cluster, training, d, options, comm)
    found = best_knobs(ctx, knobs_all)
    knobs = found[1] if found else base_knobs
    final = make_plan(ctx, knobs, ctx.memory(knobs), ctx.time(knobs)).model_copy(update={"rank": plan.rank})
    techniques = _memory_choices(ctx, knobs, options) + _comm_choices(
        structure, cluster, training, d, options, comm, knobs, reasons
    )
    return OptimizationReport(
        model=structure.model,
        plan=final,
        comm=comm,
        techniques=techniques,
        step_before_s=before_t,
        step_after_s=final.time.step_s,
        memory_before_bytes=before_m,
        memory_after_bytes=final.memory.total_bytes,
    )


def _option(ctx: PlanContext, value: str, k: MemoryKnobs, ref_m: float, ref_t: float) -> TechniqueOption:
    m, t = ctx.memory(k), ctx.time(k).step_s
    return TechniqueOption(
        value=value,
        feasible=m.feasible,
        memory_bytes=m.total_bytes,
        memory_saved_bytes=ref_m - m.total_bytes,
        step_s=t,
        time_cost_s=t - ref_t,
    )


def _memory_choices(ctx: PlanContext, k: MemoryKnobs, options: PlannerOptions) -> list[TechniqueChoice]:
    ref_m, ref_t = ctx.memory(k).total_bytes, ctx.time(k).step_s
    why = "fastest setting that fits, jointly with the other memory knobs"

    def with_(**update: Any) -> MemoryKnobs:
        return MemoryKnobs(**{"recompute": k.recompute, "zero_stage": k.zero_stage, "offload": k.offload, **update})

    return [
        TechniqueChoice(
            technique="recompute",
            chosen=k.recompute,
            baseline="none",
            reason=why,
            options=[_option(ctx, rc, with_(recompute=rc), ref_m, ref_t) for rc in options.recompute],
        ),
        TechniqueChoice(
            technique="zero stage",
            chosen=str(k.zero_stage),
            baseline="0",
            reason=why,
            options=[_option(ctx, str(z), with_(zero_stage=z), ref_m, ref_t) for z in options.zero_stages],
        ),
        TechniqueChoice(
            technique="offload",
            chosen=k.offload,
            baseline="none",
            reason=why,
            options=[_option(ctx, off, with_(offload=off), ref_m, ref_t) for off in options.offload],
        ),
    ]


def _comm_choices(
    structure: ModelStructure,
    cluster: ClusterFigures,
    training: TrainingSpec,
    d: Degrees,
    options: PlannerOptions,
    comm: CommSettings,
    k: MemoryKnobs,
    reasons: dict[str, str],
) -> list[TechniqueChoice]:
    ctx = _ctx(structure, cluster, training, d, options, comm)
    ref = ctx.memory(k)
    ref_m, ref_t = ref.total_bytes, ctx.time(k).step_s
    out = []
    for technique, value, update in _comm_candidates(d, training, options, structure.moe is not None):
        field = next(iter(update))
        current = getattr(comm, field)
        on = current == update[field]
        off_value = {
            "dp_overlap": False,
            "tp_overlap": False,
            "ep_overlap": False,
            "dispatch_dtype": "bf16",
            "grad_reduce_dtype": None,
        }[field]
        alt = comm.model_copy(update={field: off_value if on else update[field]})
        alt_ctx = _ctx(structure, cluster, training, d, options, alt)
        label_on, label_off = value, ("off" if isinstance(off_value, bool) else str(off_value or options.grad_dtype))
        opts = [
            TechniqueOption(
                value=label_on if on else label_off,
                feasible=ref.feasible,
                memory_bytes=ref_m,
                memory_saved_bytes=0.0,
                step_s=ref_t,
                time_cost_s=0.0,
            ),
            _option(alt_ctx, label_off if on else label_on, k, ref_m, ref_t),
        ]
        reason = f"saves {opts[1].time_cost_s:.3f} s per step" if on else reasons.get(technique, "")
        out.append(
            TechniqueChoice(
                technique=technique,
                chosen=label_on if on else label_off,
                baseline=label_off,
                reason=reason,
                options=opts,
            )
        )
    return out
