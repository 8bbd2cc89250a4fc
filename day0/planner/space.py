"""The search space: every degree tuple (TP, CP, PP with virtual stages, EP and expert-TP,
DP, micro-batch) meeting the structural constraints, and every memory-knob setting (ZeRO stage,
recompute, offload) the options allow. `day0.planner.search` walks it; `min_accelerators` sizes
clusters with it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

from day0.planner.inputs import ClusterFigures, PlannerOptions
from day0.planner.model import ModelCosts
from day0.planner.values import OFFLOADS, RECOMPUTES, Degrees, MemoryKnobs
from day0.spec.pipeline import TrainingSpec
from day0.steps.parallel.config import ParallelConstraints

__all__ = ["enumerate_degrees", "knob_settings", "micro_batches", "with_techniques_on"]


def _divisors(n: int) -> list[int]:
    small = [i for i in range(1, math.isqrt(n) + 1) if n % i == 0]
    return sorted({*small, *(n // i for i in small)})


def with_techniques_on(options: PlannerOptions, compute: str) -> PlannerOptions:
    """`options` with the techniques step 4 would switch on where they pay, so the search ranks complete
    plans: every communication overlap the training software has, and with fp8 compute fp8 MoE dispatch
    and fp8 activation caching (Transformer Engine's fp8 linears keep their inputs in fp8; the cache only
    saves memory in this model), each unless the spec pins it. Issue 39: plans ranked before step 4's
    overlaps were up to 13.5% slower after them than the published setup after them."""
    pins = options.pinned
    comm: dict[str, object] = {f"{o}_overlap": True for o in options.available_overlaps() if f"{o}_overlap" not in pins}
    update: dict[str, object] = {}
    if compute == "fp8":
        if "dispatch_dtype" not in pins and options.moe_token_dispatcher != "allgather":
            comm["dispatch_dtype"] = "fp8"
        if "fp8_activation_cache" not in pins:
            update["fp8_activation_cache"] = True
    return options.model_copy(update={**update, "comm": options.comm.model_copy(update=comm)})


def knob_settings(options: PlannerOptions) -> list[MemoryKnobs]:
    """Every allowed (ZeRO stage, recompute, offload), in rank order: the search's tie-break."""
    return [
        MemoryKnobs(recompute=rc, zero_stage=z, offload=off)
        for z in sorted(options.zero_stages)
        for rc in RECOMPUTES
        if rc in options.recompute
        for off in OFFLOADS
        if off in options.offload
    ]


def micro_batches(training: TrainingSpec, c: ParallelConstraints, options: PlannerOptions, dp: int) -> list[int]:
    """The micro-batches searched at data-parallel degree `dp`: the pinned one, the listed ones, else every
    size the global batch allows (the divisors of global batch / DP; the search's memory bound discards
    those too large to fit)."""
    if c.micro_batch is not None:
        return [c.micro_batch]
    if options.micro_batches is not None:
        return sorted({*options.micro_batches, training.micro_batch})
    return _divisors(training.global_batch // dp) if training.global_batch % dp == 0 else [1]


def _fixed(value: int | None, candidates: list[int]) -> list[int]:
    return [value] if value is not None else candidates


def enumerate_degrees(
    costs: ModelCosts,
    cluster: ClusterFigures,
    training: TrainingSpec,
    constraints: ParallelConstraints,
    options: PlannerOptions,
    rejected: Counter[str] | None = None,
) -> Iterator[Degrees]:
    """Every degree tuple meeting the structural constraints; counts why others were rejected."""
    rejected = rejected if rejected is not None else Counter()
    c, n, L = constraints, constraints.accelerators or cluster.accelerators, costs.num_layers
    if n > cluster.accelerators:
        rejected[f"{n} accelerators requested, the cluster has {cluster.accelerators}"] += 1
        return
    if c.tensor_parallel and c.tensor_parallel > cluster.per_node:
        rejected[f"TP {c.tensor_parallel} exceeds one node ({cluster.per_node} accelerators)"] += 1
    tps = [
        t
        for t in _fixed(c.tensor_parallel, _divisors(cluster.per_node))
        if t <= cluster.per_node and costs.heads % t == 0
    ]
    cps = [
        x
        for x in _fixed(c.context_parallel, [2**i for i in range(8) if 2**i <= options.max_context_parallel])
        if x == 1 or training.seq_len % (2 * x) == 0
    ]
    pinned_vpp = c.virtual_pipeline_stages
    for tp in tps:
        for cp in cps:
            if n % (tp * cp):
                rejected["accelerators not divisible by TP x CP"] += 1
                continue
            rest = n // (tp * cp)
            for pp in _fixed(c.pipeline_parallel, _divisors(rest)):
                if rest % pp or pp > L or pp > (c.max_pipeline_parallel or L):
                    rejected["PP does not divide the accelerators, exceeds the layers or max_pipeline_parallel"] += 1
                    continue
                if ((pinned_vpp or 1) > 1 and pp == 1) or (options.dualpipe and pp % 2 == 1):
                    rejected["PP 1 (or odd, with DualPipe) under pinned virtual stages or DualPipe"] += 1
                    continue
                dp = rest // pp
                if c.data_parallel is not None and dp != c.data_parallel:
                    rejected["DP differs from the fixed data_parallel"] += 1
                    continue
                yield from _inner(costs, training, constraints, options, tp, cp, pp, dp, rejected)


def _inner(
    costs: ModelCosts,
    training: TrainingSpec,
    c: ParallelConstraints,
    options: PlannerOptions,
    tp: int,
    cp: int,
    pp: int,
    dp: int,
    rejected: Counter[str],
) -> Iterator[Degrees]:
    moe = costs.num_experts > 0
    eps = [
        e
        for e in _fixed(c.expert_parallel, _divisors(costs.num_experts) if moe else [1])
        if (e == 1 or moe) and (not moe or costs.num_experts % e == 0)
    ]
    etps = [1, tp] if moe and tp > 1 else [1]
    if c.expert_tensor_parallel is not None:
        etps = [e for e in etps if e == c.expert_tensor_parallel]
        if not etps:
            rejected[f"expert-TP {c.expert_tensor_parallel} is neither 1 nor TP {tp}"] += 1
            return
    for mb in micro_batches(training, c, options, dp):
        if training.global_batch % (dp * mb):
            rejected["global batch not divisible by DP x micro-batch"] += 1
            continue
        m = training.global_batch // (dp * mb)
        if options.dualpipe and (m % 2 or m < 2 * pp):  # deepseek-ai/DualPipe dualpipe.py, DualPipe.step's assert
            rejected["DualPipe needs an even number of micro-batches, at least twice PP"] += 1
            continue
        vpps = [
            v
            for v in _fixed(c.virtual_pipeline_stages, list(range(1, options.max_virtual_stages + 1)))
            if not (options.dualpipe and v > 1)  # DualPipe is its own schedule
            if v == 1 or (pp > 1 and pp * v <= costs.num_layers and m % pp == 0)
        ]
        if not vpps:
            rejected["virtual stages need PP x VPP <= layers and micro-batches a multiple of PP"] += 1
            continue
        for ep in eps:
            for etp in etps:
                if (tp * cp * dp) % (ep * etp):
                    rejected["EP x expert-TP does not divide DP x CP x TP"] += 1
                    continue
                for vpp in vpps:
                    # positional: pydantic validates keywords about twice as slowly (this runs per tuple)
                    yield Degrees(tp, pp, vpp, ep, etp, cp, dp, mb, m)
