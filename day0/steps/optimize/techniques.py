"""Step 4: memory and communication techniques for a chosen plan, each with its estimated effect.

Contract: `choose_optimizations` is pure. Step 3 ranks plans with the techniques switched on that step 4
would take (`space.with_techniques_on`: the software's overlaps; fp8 dispatch and activation caching with
fp8 compute). For the plan's parallel degrees step 4 then (1) turns on, in turn, each communication technique
that shortens the step (overlaps; bf16 gradient reduction when it saves >1% of the step; fp8 MoE dispatch only
when training already computes in fp8, as DeepSeek-V3 sec. 3.3 does) and switches a lossy one step 3 ranked
with back off where it saves under 1%, then (2) re-picks recompute / ZeRO stage / offload for the fastest
setting that fits, and repeats (1) and (2) until the knobs settle. A knob the spec
pins (`options.pinned`) is never changed. The result's `sequence` is step 3's plan and the plan after
each change, in order, so the changes add up to the saving; `techniques` reports every alternative
against the final choice (memory saved, time cost). The chosen plan comes with its Megatron-LM and
torchtitan configs (`frameworks`). The result model is `optimization.Optimization`.
"""

from __future__ import annotations

from day0.planner.evaluate import PlanContext
from day0.planner.frameworks import FrameworkSetup, framework_configs
from day0.planner.inputs import CommSettings, PlannerOptions
from day0.planner.problem import PlanningProblem
from day0.planner.results import Plan, make_plan
from day0.planner.search import best_knobs
from day0.planner.values import OFFLOADS, RECOMPUTES, Degrees, MemoryKnobs
from day0.steps.optimize.optimization import Optimization, SequenceStep, TechniqueChoice, TechniqueOption

__all__ = ["Optimization", "TechniqueChoice", "TechniqueOption", "choose_optimizations"]

_MIN_GAIN = 0.01  # a lossy technique must save at least 1% of the step
_OFF = {
    "dp_overlap": False,
    "tp_overlap": False,
    "ep_overlap": False,
    "dispatch_dtype": "bf16",
    "grad_reduce_dtype": None,
}


def _ctx(problem: PlanningProblem, d: Degrees, comm: CommSettings) -> PlanContext:
    """The cost model of `d` with the communication techniques `comm` (the costs do not depend on them)."""
    return PlanContext(problem.with_options(problem.options.model_copy(update={"comm": comm})), d)


def _comm_candidates(d: Degrees, options: PlannerOptions, moe: bool) -> list[tuple[str, str, dict]]:
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


def _knob_change(before: MemoryKnobs, after: MemoryKnobs) -> str:
    parts = [
        f"{name} {getattr(before, attr)} -> {getattr(after, attr)}"
        for name, attr in (("recompute", "recompute"), ("ZeRO", "zero_stage"), ("offload", "offload"))
        if getattr(before, attr) != getattr(after, attr)
    ]
    return "memory knobs re-picked: " + ", ".join(parts)


def choose_optimizations(problem: PlanningProblem, plan: Plan) -> Optimization:
    structure, options = problem.structure, problem.options
    d, base_knobs = plan.parallel, plan.memory_knobs
    base = _ctx(problem, d, options.comm)
    before_t, before_m = base.step_seconds(base_knobs), base.memory(base_knobs).total_bytes
    sequence = [SequenceStep(after="step 3's plan", step_s=before_t, delta_s=0.0, memory_bytes=before_m)]
    comm, knobs = _applicable(options.comm, d, options, structure.moe is not None), base_knobs
    reasons: dict[str, str] = {}
    # a technique's gain depends on the memory knobs and the knobs' pick on the techniques: the techniques
    # are judged again after each re-pick until the knobs settle (issue 39: fp8 dispatch was declined
    # against the knobs before the re-pick, which its own table then showed saving 12%)
    for _ in range(4):
        comm = _techniques(problem, d, comm, knobs, reasons, sequence)
        ctx = _ctx(problem, d, comm)
        found = best_knobs(ctx, problem.knobs)
        if found is None or found[1] == knobs:
            break
        change, knobs = _knob_change(knobs, found[1]), found[1]
        memory = ctx.memory(knobs).total_bytes
        sequence.append(_row(change, ctx.step_seconds(knobs), sequence[-1].step_s, memory))
    ctx = _ctx(problem, d, comm)
    final = make_plan(ctx, knobs, ctx.memory(knobs), ctx.time(knobs)).model_copy(update={"rank": plan.rank})
    techniques = _memory_choices(ctx, knobs, options) + _comm_choices(problem, d, comm, knobs, reasons)
    moe, per_node = structure.moe is not None, problem.cluster.per_node
    setup = FrameworkSetup(problem.training, options, comm, structure.num_layers, moe, per_node)
    return Optimization(
        model=structure.model,
        plan=final,
        comm=comm,
        techniques=techniques,
        step_before_s=before_t,
        step_after_s=final.time.step_s,
        memory_before_bytes=before_m,
        memory_after_bytes=final.memory.total_bytes,
        sequence=sequence,
        frameworks=framework_configs(final, setup),
    )


def _techniques(
    problem: PlanningProblem,
    d: Degrees,
    comm: CommSettings,
    knobs: MemoryKnobs,
    reasons: dict[str, str],
    sequence: list[SequenceStep],
) -> CommSettings:
    """One pass over the communication techniques under `knobs`: each switched on where it shortens the
    step (a lossy one by over 1%), a lossy one step 3 ranked with switched back off where it saves less;
    `reasons` and `sequence` record what changed."""
    options = problem.options
    t_prev = sequence[-1].step_s
    memory = sequence[-1].memory_bytes
    for technique, value, update in _comm_candidates(d, options, problem.structure.moe is not None):
        field = next(iter(update))
        lossy = technique in ("dispatch dtype", "gradient reduce dtype")
        if field in options.pinned:
            reasons[technique] = f"pinned by {options.pinned[field]}"
            continue
        if field.endswith("_overlap") and field.removesuffix("_overlap") not in options.software_overlaps:
            reasons[technique] = "kept off: the training software has no such overlap (planner.software)"
            continue
        if technique in ("ep overlap", "dispatch dtype") and options.moe_token_dispatcher == "allgather":
            reasons[technique] = "kept off: the all-gather token dispatcher has neither (planner.moe_token_dispatcher)"
            continue
        if technique == "dispatch dtype" and problem.training.precision.compute != "fp8":
            reasons[technique] = "kept bf16: fp8 dispatch only with fp8 training (accuracy)"
            continue
        on = getattr(comm, field) == update[field]
        if on and not lossy:
            reasons.setdefault(technique, "on in step 3's plan (the search ranks plans with it)")
            continue
        trial = comm.model_copy(update={field: _OFF[field]} if on else update)
        t_new = _ctx(problem, d, trial).step_seconds(knobs)
        if on:  # a lossy technique step 3 ranked with: kept only where it saves over 1%
            if t_prev >= t_new * (1 - _MIN_GAIN):
                comm, reasons[technique] = trial, "switched back off: saves under 1% of the step for this plan"
                sequence.append(_row(f"{technique} off", t_new, t_prev, memory))
                t_prev = t_new
            else:
                reasons.setdefault(technique, f"on in step 3's plan: saves {t_new - t_prev:.3f} s per step")
        elif t_new < t_prev * (1 - _MIN_GAIN if lossy else 1):
            comm, reasons[technique] = trial, f"saves {t_prev - t_new:.3f} s per step (in the sequence above)"
            sequence.append(_row(f"{technique} {value}", t_new, t_prev, memory))
            t_prev = t_new
        else:
            reasons[technique] = "no measurable gain for this plan"
    return comm


def _applicable(comm: CommSettings, d: Degrees, options: PlannerOptions, moe: bool) -> CommSettings:
    """`comm` without the techniques step 3 ranked every plan with that have nothing to act on in these
    degrees (TP overlap at TP 1, MoE dispatch techniques without EP), unless pinned: the plan names none."""
    listed = {next(iter(u)) for _t, _v, u in _comm_candidates(d, options, moe)}
    unused = ("tp_overlap", "ep_overlap", "dispatch_dtype")
    return comm.model_copy(update={f: _OFF[f] for f in unused if f not in listed and f not in options.pinned})


def _row(after: str, step: float, before: float, memory: float) -> SequenceStep:
    return SequenceStep(after=after, step_s=step, delta_s=step - before, memory_bytes=memory)


def _option(ctx: PlanContext, value: str, k: MemoryKnobs, ref_m: float, ref_t: float) -> TechniqueOption:
    m, t = ctx.memory(k), ctx.step_seconds(k)
    return TechniqueOption(
        value=value,
        feasible=m.feasible,
        memory_bytes=m.total_bytes,
        memory_saved_bytes=ref_m - m.total_bytes,
        step_s=t,
        time_cost_s=t - ref_t,
    )


def _memory_choices(ctx: PlanContext, k: MemoryKnobs, options: PlannerOptions) -> list[TechniqueChoice]:
    """Recompute, ZeRO stage and offload: every value against the chosen one (a pinned knob's too, so the
    plan shows what unpinning it would give)."""
    ref_m, ref_t = ctx.memory(k).total_bytes, ctx.step_seconds(k)
    why = "fastest setting that fits, jointly with the other memory knobs"
    pins = options.pinned

    def with_(**update: object) -> MemoryKnobs:
        values = {"recompute": k.recompute, "zero_stage": k.zero_stage, "offload": k.offload, **update}
        return MemoryKnobs(**values)  # type: ignore[arg-type]  # the three fields, validated by the model

    def choice(name: str, field: str, chosen: str, baseline: str, values: list, searched: list) -> TechniqueChoice:
        alternatives = values if field in pins else searched
        return TechniqueChoice(
            technique=name,
            chosen=chosen,
            baseline=baseline,
            reason=f"pinned by {pins[field]}" if field in pins else why,
            options=[_option(ctx, str(v), with_(**{field: v}), ref_m, ref_t) for v in alternatives],
        )

    return [
        choice("recompute", "recompute", k.recompute, "none", list(RECOMPUTES), options.recompute),
        choice("zero stage", "zero_stage", str(k.zero_stage), "0", [0, 1, 2, 3], options.zero_stages),
        choice("offload", "offload", k.offload, "none", list(OFFLOADS), options.offload),
    ]


def _comm_choices(
    problem: PlanningProblem, d: Degrees, comm: CommSettings, k: MemoryKnobs, reasons: dict[str, str]
) -> list[TechniqueChoice]:
    options = problem.options
    ctx = _ctx(problem, d, comm)
    ref = ctx.memory(k)
    ref_m, ref_t = ref.total_bytes, ctx.step_seconds(k)
    out = []
    for technique, value, update in _comm_candidates(d, options, problem.structure.moe is not None):
        field = next(iter(update))
        on = getattr(comm, field) == update[field]
        off_value = _OFF[field]
        alt = comm.model_copy(update={field: off_value if on else update[field]})
        alt_ctx = _ctx(problem, d, alt)
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
        reason = reasons.get(technique, "")
        if on and not reason.startswith("pinned"):
            reason = f"{reason}; off costs {opts[1].time_cost_s:.3f} s per step in the final plan".lstrip("; ")
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
