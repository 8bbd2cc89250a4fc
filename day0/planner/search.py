"""The search: parallel plans (TP, PP with virtual stages, EP and expert-TP, CP, DP, micro-batch) and memory
knobs (ZeRO stage, recompute, offload) for the best feasible step time, over one `PlanningProblem`.

Contract: `plan_parallelism` is pure and deterministic: a best-first branch and bound over degree tuples
(sorted by a time lower bound; a memory lower bound discards tuples no knob setting can fit) returning
the best knob setting per tuple, ranked. `brute_force` evaluates every (tuple, knobs) pair of the same
cost model; both rank by the same key, so they agree on the best plan exactly.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from day0.planner.bounds import StaticBound
from day0.planner.evaluate import PlanContext
from day0.planner.explain import pinned_layout_reasons
from day0.planner.inputs import GIB
from day0.planner.memory import param_bytes, usable_bytes
from day0.planner.problem import PlanningProblem
from day0.planner.results import MEMORY_TERMS, Infeasibility, Plan, PlanSearch, make_plan
from day0.planner.space import enumerate_degrees, with_techniques_on
from day0.planner.values import OFFLOADS, RECOMPUTES, Degrees, MemoryEstimate, MemoryKnobs

__all__ = ["best_knobs", "brute_force", "min_accelerators", "overflow_reason", "plan_parallelism"]

_MAX_ACCELERATORS = 1 << 18


def _degrees_key(d: Degrees) -> tuple[int, ...]:
    """The degrees' part of the ranking key, in tie-break order."""
    return (
        d.tensor_parallel,
        d.pipeline_parallel,
        d.virtual_pipeline_stages,
        d.context_parallel,
        d.expert_parallel,
        d.expert_tensor_parallel,
        d.micro_batch,
    )


def _key(d: Degrees, k: MemoryKnobs, step: float) -> tuple:
    return (step, *_degrees_key(d), k.zero_stage, RECOMPUTES.index(k.recompute), OFFLOADS.index(k.offload))


def best_knobs(
    ctx: PlanContext, knobs: Sequence[MemoryKnobs], worse_than: tuple | None = None
) -> tuple[tuple, MemoryKnobs] | None:
    """The fastest knob setting that fits: times first (cheap), memory checked in that order; None also
    when every setting that fits ranks after `worse_than` (the search's worst kept plan). Within one
    degree tuple `_key` orders by (step, knob rank), and `knobs` come in rank order (`knob_settings`), so
    the index breaks ties and the full key is built for the winner only."""
    steps = ctx.step_table(knobs)
    limit = worse_than[0] if worse_than is not None else math.inf
    timed = sorted((step, j) for j, step in enumerate(steps) if step <= limit)
    for step, j in timed:
        key = _key(ctx.d, knobs[j], step)
        if worse_than is not None and key > worse_than:
            return None
        if ctx.fits(knobs[j]):
            return key, knobs[j]
    return None


def _schedules(problem: PlanningProblem) -> list[PlanningProblem]:
    """The pipeline schedules searched: the options' own, and DualPipe beside 1F1B where the software has it
    and the spec neither pins nor writes it (issue 39: a published DualPipe plan beat the planner's own)."""
    options = problem.options
    if options.dualpipe or not options.software_dualpipe or "dualpipe" in options.pinned:
        return [problem]
    return [problem, problem.with_options(options.model_copy(update={"dualpipe": True}))]


def _searched(problem: PlanningProblem) -> PlanningProblem:
    """`problem` with the techniques step 4 would switch on (`with_techniques_on`): the plans ranked."""
    return problem.with_options(with_techniques_on(problem.options, problem.training.precision.compute))


def _fastest(searches: list[PlanSearch]) -> PlanSearch:
    """The search whose best plan is fastest (the first when none has a plan, or on a tie)."""
    feasible = [s for s in searches if s.best is not None]
    return min(feasible, key=lambda s: s.plans[0].time.step_s) if feasible else searches[0]


def plan_parallelism(problem: PlanningProblem, find_min_accelerators: bool = True) -> PlanSearch:
    """Ranked feasible plans (best per degree tuple) or, if none fits, why and the accelerators needed; with
    two schedules searched (`_schedules`), the plans of the one with the fastest plan."""
    first, *others = _schedules(_searched(problem))
    found = _search(first, find_min_accelerators)
    if found.best is None:  # DualPipe's tuples are 1F1B's with more memory: none fits either
        return found
    cutoff = found.best.time.step_s  # only a faster plan changes the answer
    return _fastest([found, *(_search(o, False, cutoff) for o in others)])


def _search(problem: PlanningProblem, find_min_accelerators: bool, cutoff: float = math.inf) -> PlanSearch:
    """The best-first search of one schedule; with a `cutoff`, only tuples whose bound is under it."""
    t0 = time.perf_counter()
    p = problem
    costs, cluster, training, cons, options = p.costs, p.cluster, p.training, p.constraints, p.options
    rejected: Counter[str] = Counter()
    knobs = problem.knobs
    bound_of = StaticBound(problem)
    # best-first on a two-level bound: every tuple enters with the cheap compute-only bound, and is
    # re-queued with the static bound when it first reaches the front; a tuple is evaluated when its
    # static bound reaches the front, and the search stops when any bound is above the kept plans
    degrees = list(enumerate_degrees(costs, cluster, training, cons, options, rejected))
    # ties broken on the degrees in `_key`'s order (its knob part is the same for every tuple here)
    queue = [(bound_of.quick(d), 0, _degrees_key(d), i) for i, d in enumerate(degrees)]
    if cutoff < math.inf:  # a tuple whose bound reaches the cutoff is never evaluated: not queued
        queue = [q for q in queue if q[0] < cutoff]
    heapq.heapify(queue)
    min_mem, evaluated, visited, leanest = math.inf, 0, 0, None
    kept: list[tuple] = []  # heap of negated keys: kept[0] is the worst kept plan
    while queue:
        bound, refined, tie, i = heapq.heappop(queue)
        if (len(kept) >= options.keep_plans and bound > -kept[0][0][0]) or bound >= cutoff:
            break
        d = degrees[i]
        if not refined:
            heapq.heappush(queue, (bound_of(d), 1, tie, i))
            continue
        visited += 1
        ctx = PlanContext(problem, d, bound_of.rates)
        if len(kept) >= options.keep_plans and ctx.time_lower_bound() > -kept[0][0][0]:
            continue  # before the memory bound: with plans kept, the leanest setup is not reported
        lb = ctx.memory_lower_bound()
        if lb < min_mem:
            min_mem, leanest = lb, ctx
        if lb > ctx.capacity:
            rejected["memory: no ZeRO/recompute/offload setting fits"] += 1
            continue
        evaluated += len(knobs)
        worst = tuple(-x for x in kept[0][0]) if len(kept) >= options.keep_plans else None
        found = best_knobs(ctx, knobs, worst)
        if found is None:
            rejected[
                "memory: no ZeRO/recompute/offload setting fits"
                if worst is None
                else "pruned: every setting that fits ranks below the kept plans"
            ] += 1
            continue
        item = (tuple(-x for x in found[0]), found[1], ctx)
        if len(kept) < options.keep_plans:
            heapq.heappush(kept, item)
        elif item[0] > kept[0][0]:
            heapq.heapreplace(kept, item)
    if len(degrees) > visited:
        rejected["pruned: step-time lower bound above the kept plans"] += len(degrees) - visited
    ranked = sorted(((tuple(-x for x in neg), k, ctx) for neg, k, ctx in kept), key=lambda r: r[0])
    layout = pinned_layout_reasons(costs, cluster, training, cons, options) if not degrees else []
    outcome = _Outcome(ranked, rejected, min_mem, len(degrees), evaluated, time.perf_counter() - t0, layout)
    report = _report(problem, outcome, find_min_accelerators)
    if not report.plans and leanest is not None:
        report.closest_infeasible = [_leanest_plan(leanest, knobs)]
    return report


def _leanest_plan(ctx: PlanContext, knobs: Sequence[MemoryKnobs]) -> Plan:
    """The least-memory knob setting of a tuple, as an infeasible plan that says by how much it misses
    and which terms hold the memory."""
    k = min(knobs, key=lambda k: (ctx.memory(k).total_bytes, _key(ctx.d, k, 0.0)))
    m = ctx.memory(k)
    return make_plan(ctx, k, m, ctx.time(k), overflow_reason(m))


def overflow_reason(m: MemoryEstimate) -> str:
    """'needs X GiB per accelerator, Y GiB available: Z GiB over; largest terms ...' (or the host's)."""
    if m.total_bytes > m.capacity_bytes:
        terms = sorted(((getattr(m, t), t) for t in MEMORY_TERMS), reverse=True)[:3]
        largest = ", ".join(f"{t.removesuffix('_bytes').replace('_', ' ')} {v / GIB:.1f}" for v, t in terms)
        return (
            f"needs {m.total_bytes / GIB:.1f} GiB per accelerator, {m.capacity_bytes / GIB:g} GiB available: "
            f"{(m.total_bytes - m.capacity_bytes) / GIB:.1f} GiB over (largest: {largest} GiB)"
        )
    over = (m.host_offload_bytes - m.host_capacity_bytes) / GIB
    return (
        f"needs {m.host_offload_bytes / GIB:.1f} GiB host memory per accelerator, "
        f"{m.host_capacity_bytes / GIB:g} GiB available: {over:.1f} GiB over"
    )


def brute_force(problem: PlanningProblem) -> PlanSearch:
    """Every (degree tuple, knob setting) evaluated in full: the reference the pruned search must match."""
    return _fastest([_brute_force(o) for o in _schedules(_searched(problem))])


def _brute_force(problem: PlanningProblem) -> PlanSearch:
    t0 = time.perf_counter()
    options = problem.options
    rejected: Counter[str] = Counter()
    knobs, ranked, evaluated, tuples, min_mem = problem.knobs, [], 0, 0, math.inf
    p = problem
    for d in enumerate_degrees(p.costs, p.cluster, p.training, p.constraints, options, rejected):
        ctx, tuples, best = PlanContext(problem, d), tuples + 1, None
        for k in knobs:
            evaluated += 1
            step, m = ctx.step_seconds(k), ctx.memory(k)
            min_mem = min(min_mem, m.total_bytes)
            if m.feasible and (best is None or _key(d, k, step) < best[0]):
                best = (_key(d, k, step), k, ctx)
        if best is None:
            rejected["memory: no ZeRO/recompute/offload setting fits"] += 1
        else:
            ranked.append(best)
    ranked = sorted(ranked, key=lambda r: r[0])[: options.keep_plans]
    outcome = _Outcome(ranked, rejected, min_mem, tuples, evaluated, time.perf_counter() - t0)
    return _report(problem, outcome, False)


def min_accelerators(problem: PlanningProblem) -> tuple[int | None, float]:
    """(smallest whole-node accelerator count with a feasible plan, or None up to 2^18; model-state bytes
    with every state sharded). Doubles from the model-state floor to the first count that fits, then scans
    the whole-node counts below it (feasibility is not monotone: batch and layer divisibility)."""
    problem = _searched(problem)
    if problem.options.micro_batches is None:  # feasibility only: the least micro-batch is the leanest
        problem = problem.with_options(problem.options.model_copy(update={"micro_batches": [1]}))
    problem = problem.with_constraints(problem.constraints.model_copy(update={"accelerators": None}))
    structure, cluster, options = problem.structure, problem.cluster, problem.options
    prec = problem.training.precision
    pb = param_bytes(prec.compute, prec.master_weights, options.grad_dtype, options.optimizer_state_dtype)
    states = structure.params_total * pb.total
    usable = usable_bytes(cluster.memory_bytes, options.fragmentation_fraction, options.framework_overhead_gib)
    floor_nodes = max(1, math.ceil(states / max(usable, 1) / cluster.per_node))
    knobs = sorted(problem.knobs, key=lambda k: (-k.zero_stage, -RECOMPUTES.index(k.recompute)))
    nodes = 2 ** math.ceil(math.log2(floor_nodes))
    while nodes * cluster.per_node <= _MAX_ACCELERATORS:
        if _fits(problem.with_cluster(cluster.with_accelerators(nodes * cluster.per_node)), knobs):
            below = (
                n
                for n in range(max(floor_nodes, nodes // 2 + 1), nodes)
                if _fits(problem.with_cluster(cluster.with_accelerators(n * cluster.per_node)), knobs)
            )
            return next(below, nodes) * cluster.per_node, states
        nodes *= 2
    return None, states


def _fits(problem: PlanningProblem, knobs: list[MemoryKnobs]) -> bool:
    """Whether any degree tuple and knob setting fits (tuples tried leanest first)."""
    p = problem
    ctxs = sorted(
        (PlanContext(p, d) for d in enumerate_degrees(p.costs, p.cluster, p.training, p.constraints, p.options)),
        key=lambda c: c.memory_lower_bound(),
    )
    for ctx in ctxs:
        if ctx.memory_lower_bound() > ctx.capacity:
            return False
        if any(ctx.memory(k).feasible for k in knobs):
            return True
    return False


@dataclass
class _Outcome:
    ranked: list[tuple[tuple, MemoryKnobs, PlanContext]]
    rejected: Counter[str]
    min_memory: float
    tuples: int
    evaluated: int
    seconds: float
    layout: list[str] = field(default_factory=list)  # why the pinned degrees admit no layout, with numbers


def _report(problem: PlanningProblem, outcome: _Outcome, find_min: bool) -> PlanSearch:
    structure, cluster, training, options = problem.structure, problem.cluster, problem.training, problem.options
    ranked, rejected, min_mem, tuples = outcome.ranked, outcome.rejected, outcome.min_memory, outcome.tuples
    plans = []
    for i, (_key, k, ctx) in enumerate(ranked, 1):
        plan = make_plan(ctx, k, ctx.memory(k), ctx.time(k))
        plans.append(plan.model_copy(update={"rank": i}))
    infeasible = [
        Infeasibility(
            reason=r,
            count=n,
            min_memory_gib=round(min_mem / GIB, 2) if r.startswith("memory") and min_mem < math.inf else None,
        )
        for r, n in rejected.most_common()
    ]
    n_acc, gib = problem.constraints.accelerators or cluster.accelerators, cluster.hardware.figure("memory_gib")
    need, notes = None, []
    if plans:
        best = plans[0]
        message = (
            f"best of {len(plans)} feasible plans: TP{best.parallel.tensor_parallel} "
            f"PP{best.parallel.pipeline_parallel} EP{best.parallel.expert_parallel} "
            f"CP{best.parallel.context_parallel} DP{best.parallel.data_parallel}, "
            f"{best.memory.total_bytes / GIB:.1f} of {gib:g} GiB, "
            f"{best.time.step_s:.2f} s/step, MFU {best.time.mfu:.1%}"
        )
    else:
        message = f"infeasible: no plan fits {n_acc} accelerators of {gib:g} GiB"
        if min_mem < math.inf:
            message += f"; the leanest setup needs {min_mem / GIB:.1f} GiB per accelerator"
        if tuples == 0:
            why = "; ".join(outcome.layout) if outcome.layout else "see rejected"
            message += f"; no parallel layout satisfies the constraints ({why})"
        elif find_min:
            need, states = min_accelerators(problem)
            floor = math.ceil(
                states
                / usable_bytes(cluster.memory_bytes, options.fragmentation_fraction, options.framework_overhead_gib)
            )
            message += (
                f"; needs at least {floor} accelerators of {gib:g} GiB for the model states "
                f"alone ({structure.params_total / 1e9:.1f}B parameters x {states / structure.params_total:.0f}"
                f" bytes = {states / GIB:,.0f} GiB)"
            )
            message += (
                f"; the smallest whole-node count with a feasible plan is {need}"
                if need
                else f"; no count up to {_MAX_ACCELERATORS} fits"
            )
    if structure.moe and "deepseek" in structure.model_type and len(_schedules(problem)) == 1 and not options.dualpipe:
        notes.append("1F1B schedule assumed; parallel.dualpipe: true plans DeepSeek-V3's DualPipe (two weight copies)")
    return PlanSearch(
        model=structure.model,
        params_total=structure.params_total,
        params_active=structure.params_active,
        cluster=cluster.with_accelerators(n_acc),
        training=training,
        options=options,
        feasible=bool(plans),
        message=message,
        plans=plans,
        infeasible=infeasible,
        min_accelerators=need,
        tuples_considered=tuples,
        configurations_evaluated=outcome.evaluated,
        search_seconds=outcome.seconds,
        notes=notes,
    )
