"""The maths of the microbenchmarks, as NCCL-tests and the roofline define it.

References: NCCL-tests' PERFORMANCE.md: algorithm bandwidth = bytes / time; bus bandwidth = algbw x
2(n-1)/n for all-reduce, x (n-1)/n for all-gather and all-to-all (the per-link traffic of a ring, so
figures compare with the link speed across group sizes); a GEMM does 2·m·n·k FLOPs (a layer's forward
and backward: 3 GEMMs of its shape); a copy moves 2 x bytes (read + write); the host cost of an op is a
forward + backward's time over the aten ops it dispatched; an optimizer step costs per tensor and per
element (two timings over the same elements tell them apart).
"""

from __future__ import annotations

import statistics

__all__ = [
    "BUS_FACTOR",
    "bus_gbps",
    "copy_gbps",
    "gemm_tflops",
    "median_seconds",
    "microseconds_per_op",
    "optimizer_costs",
]

BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}


def median_seconds(samples: list[float]) -> float:
    return statistics.median(samples)


def gemm_tflops(m: int, n: int, k: int, seconds: float, gemms: int = 1, host_s: float = 0.0) -> float:
    """TFLOP/s of `gemms` GEMMs of shape (m, n, k) done in `seconds`, of which `host_s` was the host's
    dispatch of the ops around them (the cost model counts that apart, per op). The device time left is
    never taken below half the timing: a timing the dispatch dominates says little about the GEMM."""
    return gemms * 2 * m * n * k / max(seconds - host_s, seconds / 2) / 1e12


def copy_gbps(nbytes: int, seconds: float) -> float:
    return 2 * nbytes / seconds / 1e9


def microseconds_per_op(seconds: float, ops: int) -> float:
    """Host time per dispatched op of a run that dispatched `ops` aten ops in `seconds`."""
    if ops <= 0:
        raise ValueError(f"a dispatch timing needs at least one op, got {ops}")
    return seconds / ops * 1e6


def bus_gbps(op: str, nbytes: int, world: int, seconds: float) -> float:
    """NCCL-tests bus bandwidth of `op` on a `nbytes` buffer per rank (all-gather: the gathered size)."""
    return nbytes / seconds / 1e9 * BUS_FACTOR[op](world)


def optimizer_costs(few: tuple[int, float], many: tuple[int, float], params: int) -> tuple[float, float]:
    """(microseconds per tensor, nanoseconds per element) of an optimizer step from two timings
    (tensors, seconds) over the same `params` elements: the per-tensor cost from their difference, the
    per-element cost from what is left of the first (each clamped at zero against timing noise)."""
    (t_few, s_few), (t_many, s_many) = few, many
    if t_many <= t_few:
        raise ValueError(f"the second timing needs more tensors than the first ({t_many} <= {t_few})")
    per_tensor = max(0.0, (s_many - s_few) / (t_many - t_few))
    return per_tensor * 1e6, max(0.0, s_few - t_few * per_tensor) / params * 1e9
