"""Pipeline stage assignment: contiguous layer chunks balanced by forward FLOPs, the output head's cost
counted on the last chunk, chunk c on rank c mod p (Megatron-LM's interleaved layout).

Contract: `rank_groups` is pure and memoised on (costs, pp, vpp, seq). Ranks holding the same layers
(and no embedding/head) form one group, so the cost model evaluates a handful of groups, not every rank;
a group's `first_rank` holds the most in-flight micro-batches of the group.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from day0.planner.memory import KindSums, kind_activation_sums
from day0.planner.model import ModelCosts
from day0.planner.step_time import StageWork

__all__ = ["RankGroup", "layer_counts", "partition", "rank_groups", "stage_work"]


@dataclass(frozen=True, slots=True)
class RankGroup:
    """Ranks with identical layers; sums are over one rank's layers (params: counts, others per token)."""

    first_rank: int
    counts: tuple[int, ...]
    has_embedding: bool
    has_head: bool
    work: StageWork  # forward work per token: what the step-time terms read
    dense: float  # TP-sharded parameters
    replicated: float
    expert: float  # routed-expert parameters
    act: KindSums  # stored bytes/token (TP-split, SP region, routed copies, scores per s) by recompute


def _layer_costs(costs: ModelCosts, seq: int) -> list[float]:
    per_kind = [2 * k.active_params + k.attn_flops_per_seq * seq for k in costs.kinds]
    out = [per_kind[i] for i in costs.layer_kind]
    out[-1] += costs.head_flops_per_token
    return out


def _greedy(layer_costs: list[float], bound: float) -> list[int]:
    """Chunk sizes filling each chunk up to `bound`."""
    sizes, acc = [0], 0.0
    for c in layer_costs:
        if sizes[-1] and acc + c > bound:
            sizes.append(0)
            acc = 0.0
        sizes[-1] += 1
        acc += c
    return sizes


@lru_cache(maxsize=4096)
def partition(costs: ModelCosts, chunks: int, seq: int) -> tuple[int, ...]:
    """Sizes of `chunks` contiguous chunks minimising the largest chunk's FLOPs (binary search on the bound)."""
    lc = _layer_costs(costs, seq)
    if chunks > len(lc):
        raise ValueError(f"{chunks} pipeline chunks for {len(lc)} layers: each chunk needs at least one layer")
    lo, hi = max(lc), sum(lc)
    for _ in range(60):
        mid = (lo + hi) / 2
        if len(_greedy(lc, mid)) <= chunks:
            hi = mid
        else:
            lo = mid
    sizes = _greedy(lc, hi)
    while len(sizes) < chunks:  # split the largest chunk: never raises the maximum
        i = max(range(len(sizes)), key=lambda j: sizes[j])
        sizes[i : i + 1] = [sizes[i] - sizes[i] // 2, sizes[i] // 2]
    return tuple(sizes)


def stage_work(costs: ModelCosts, counts: tuple[int, ...], has_head: bool) -> StageWork:
    """The forward work per token of `counts[i]` layers of each kind (and the head, if held)."""
    ks = costs.kinds

    def total(f) -> float:
        return sum(n * f(k) for n, k in zip(counts, ks))

    return StageWork(
        layers=sum(counts),
        moe_layers=sum(n for n, k in zip(counts, ks) if k.is_moe),
        dense_active=total(lambda k: k.active_params - k.routed_active_params),
        routed_active=total(lambda k: k.routed_active_params),
        head_flops=costs.head_flops_per_token if has_head else 0.0,
        attn_per_seq=total(lambda k: k.attn_flops_per_seq),
        selective_flops=total(lambda k: k.selective_flops),
        cp_kv=total(lambda k: k.cp_kv_bytes),
        memory_bound=total(lambda k: k.memory_bound_bytes),
        selective_memory_bound=total(lambda k: k.selective_memory_bound_bytes),
        scores_traffic_per_seq=total(lambda k: k.scores_traffic_per_seq),
    )


def layer_counts(costs: ModelCosts) -> tuple[int, ...]:
    """Layers of each kind in the whole model."""
    return tuple(costs.layer_kind.count(i) for i in range(len(costs.kinds)))


def _group(costs: ModelCosts, rank: int, counts: tuple[int, ...], pp: int) -> RankGroup:
    ks = costs.kinds

    def total(f) -> float:
        return sum(n * f(k) for n, k in zip(counts, ks))

    sums = [kind_activation_sums(k) for k in ks]

    def act(j: int) -> tuple[float, float, float]:  # j indexes `KindSums`; by recompute (none, selective, full)
        none, selective, full = (sum(n * s[j][i] for n, s in zip(counts, sums)) for i in range(3))
        return none, selective, full

    return RankGroup(
        first_rank=rank,
        counts=counts,
        has_embedding=rank == 0,
        has_head=rank == pp - 1,
        work=stage_work(costs, counts, rank == pp - 1),
        dense=total(lambda k: k.dense_params),
        replicated=total(lambda k: k.replicated_params),
        expert=total(lambda k: k.expert_params),
        act=(act(0), act(1), act(2), act(3)),
    )


@lru_cache(maxsize=4096)
def rank_groups(costs: ModelCosts, pp: int, vpp: int, seq: int) -> tuple[tuple[RankGroup, ...], tuple[int, ...]]:
    """(groups of identical ranks, layers per rank)."""
    sizes = partition(costs, pp * vpp, seq)
    counts = [[0] * len(costs.kinds) for _ in range(pp)]
    start = 0
    for c, size in enumerate(sizes):
        for layer in range(start, start + size):
            counts[c % pp][costs.layer_kind[layer]] += 1
        start += size
    seen: dict[tuple, RankGroup] = {}
    for r in range(pp):
        key = (tuple(counts[r]), r == 0, r == pp - 1)
        if key not in seen:
            seen[key] = _group(costs, r, tuple(counts[r]), pp)
    return tuple(seen.values()), tuple(sum(c) for c in counts)
