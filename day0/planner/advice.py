"""What a planner user does next: the plan at an elastic cluster's minimum beside its maximum, and one line
per move that would help, each with its numbers.

Contract: pure over step 3's inputs and its report. `elastic_points` plans the cluster at its elastic
minimum (the degrees the spec pins kept, DP and the accelerator count left to the smaller cluster) and
puts the report's best plan at its maximum beside it. `next_steps` names: a better micro-batch than the
pinned one, what unpinning each pinned memory knob would give on the chosen degrees, a knob setting that
would make the leanest infeasible setup fit, the smallest whole-node cluster with a feasible plan, and
calibration when the figures are the datasheet's. Each is evaluated with the same cost model, on the
chosen (or leanest) degree tuple, so the lines cost a handful of evaluations, not searches.
"""

from __future__ import annotations

from day0.planner.evaluate import PlanContext
from day0.planner.inputs import GIB
from day0.planner.problem import PlanningProblem
from day0.planner.results import ClusterPoint, Plan, PlanSearch, degrees_label
from day0.planner.search import best_knobs, min_accelerators, plan_parallelism
from day0.planner.values import OFFLOADS, RECOMPUTES, Degrees

__all__ = ["elastic_points", "next_steps"]

_MICRO_BATCHES = (1, 2, 4, 8)
_FULL = {"recompute": list(RECOMPUTES), "zero_stages": [0, 1, 2, 3], "offload": list(OFFLOADS)}
_KNOB_OPTION = {"recompute": "recompute", "zero_stage": "zero_stages", "offload": "offload"}


def _resized(problem: PlanningProblem) -> PlanningProblem:
    """The pins that still mean something on a cluster of another size (DP and the count follow it)."""
    return problem.with_constraints(
        problem.constraints.model_copy(update={"data_parallel": None, "accelerators": None})
    )


def _point(label: str, n: int, plan: Plan | None, message: str) -> ClusterPoint:
    if plan is None:
        return ClusterPoint(label=label, accelerators=n, feasible=False, message=message)
    return ClusterPoint(
        label=label,
        accelerators=n,
        feasible=True,
        degrees=degrees_label(plan.parallel),
        step_s=plan.time.step_s,
        memory_gib=plan.memory.total_bytes / GIB,
        mfu=plan.time.mfu,
        message=message,
    )


def elastic_points(problem: PlanningProblem, report: PlanSearch) -> list[ClusterPoint]:
    """The best plan at the elastic minimum and at the maximum (empty without an elastic pool)."""
    cluster = problem.cluster
    low = cluster.elastic_min_accelerators
    if low is None:
        return []
    nodes = cluster.pool_nodes
    lows = ", ".join(f"{name} {lo}" for name, (lo, _hi) in nodes.items())
    highs = ", ".join(f"{name} {hi}" for name, (_lo, hi) in nodes.items())
    top = _point(f"elastic maximum (nodes: {highs})", cluster.accelerators, report.best, report.message)
    if low == 0:
        return [_point(f"elastic minimum (nodes: {lows})", 0, None, "no accelerators at the pools' minima"), top]
    small = plan_parallelism(
        _resized(problem).with_cluster(cluster.with_accelerators(low)), find_min_accelerators=False
    )
    return [_point(f"elastic minimum (nodes: {lows})", low, small.best, small.message), top]


def _fastest(problem: PlanningProblem, d: Degrees) -> tuple[float, float] | None:
    """(step s, GiB) of the fastest fitting knob setting of a tuple, or None when none fits."""
    ctx = PlanContext(problem, d)
    found = best_knobs(ctx, problem.knobs)
    if found is None:
        return None
    return found[0][0], ctx.memory(found[1]).total_bytes / GIB


def _micro_batch_line(searched: PlanningProblem, best: Plan) -> str | None:
    o, d, tr = searched.options, best.parallel, searched.training
    if "micro_batch" not in o.pinned:
        return None
    lines = []
    for mb in _MICRO_BATCHES:
        if mb == d.micro_batch or tr.global_batch % (d.data_parallel * mb):
            continue
        m = tr.global_batch // (d.data_parallel * mb)
        if d.virtual_pipeline_stages > 1 and m % d.pipeline_parallel:
            continue
        other = d.__class__(**{**_fields(d), "micro_batch": mb, "num_microbatches": m})
        got = _fastest(searched.with_options(o.model_copy(update={"micro_batches": [mb]})), other)
        if got is not None and got[0] < best.time.step_s:
            lines.append((got[0], mb, got[1]))
    if not lines:
        return None
    step, mb, gib = min(lines)
    gain = 1 - step / best.time.step_s
    return (
        f"micro-batch {mb} would take {step:.3f} s per step ({gain:.1%} faster, {gib:.1f} GiB) with the same "
        f"degrees; micro-batch {d.micro_batch} is pinned by {o.pinned['micro_batch']}"
    )


def _fields(d: Degrees) -> dict[str, int]:
    return {k: getattr(d, k) for k in d.__dataclass_fields__}


def _unpin_lines(searched: PlanningProblem, plan: Plan, fits: bool) -> list[str]:
    """For each pinned memory knob: the fastest setting on these degrees with that knob free."""
    o, out = searched.options, []
    for knob, option in _KNOB_OPTION.items():
        if knob not in o.pinned:
            continue
        got = _fastest(searched.with_options(o.model_copy(update={option: _FULL[option]})), plan.parallel)
        if got is None:
            continue
        pinned_value = getattr(plan.memory_knobs, knob)
        if fits and got[0] < plan.time.step_s * (1 - 1e-9):
            out.append(
                f"unpinning {o.pinned[knob]} ({knob} {pinned_value}): {got[0]:.3f} s per step "
                f"({1 - got[0] / plan.time.step_s:.1%} faster, {got[1]:.1f} GiB) on the same degrees"
            )
        elif not fits:
            out.append(
                f"unpinning {o.pinned[knob]} ({knob} {pinned_value}) makes this setup fit: "
                f"{got[1]:.1f} GiB, {got[0]:.3f} s per step"
            )
    return out


def _fit_line(searched: PlanningProblem, leanest: Plan) -> str | None:
    """When nothing fits and no knob is pinned: does any ZeRO/recompute/offload make the leanest fit?"""
    got = _fastest(searched.with_options(searched.options.model_copy(update=_FULL)), leanest.parallel)
    return None if got is None else f"{degrees_label(leanest.parallel)} fits with other memory knobs: {got[1]:.1f} GiB"


def next_steps(problem: PlanningProblem, report: PlanSearch, platform: str) -> list[str]:
    """What to do next, one line each (see the module contract)."""
    searched = problem.with_cluster(report.cluster).with_options(report.options)  # what the search ranked with
    out: list[str] = []
    best = report.best
    if best is not None:
        line = _micro_batch_line(searched, best)
        out += [line] if line else []
        out += _unpin_lines(searched, best, fits=True)
    elif report.closest_infeasible:
        leanest = report.closest_infeasible[0]
        out += _unpin_lines(searched, leanest, fits=False)
        line = _fit_line(searched, leanest) if not report.options.pinned else None
        out += [line] if line else []
    need = report.min_accelerators
    if need is None and report.tuples_considered:
        need = min_accelerators(_resized(searched))[0]
    if need is not None:
        per, now = report.cluster.per_node, report.cluster.accelerators
        where = f"of the {now} here" if need < now else ("this cluster" if need == now else f"the cluster has {now}")
        nodes = need // per
        out.append(
            f"the smallest whole-node cluster with a feasible plan: {need} accelerator{'s' * (need != 1)} "
            f"({nodes} node{'s' * (nodes != 1)} of {per}; {where})"
        )
    if report.options.profile == "datasheet":
        out.append(
            f"the figures are the datasheet's: `day0 calibrate {platform}` measures the platform, then plan again"
        )
    return out
