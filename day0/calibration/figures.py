"""The maths of the microbenchmarks, as NCCL-tests and the roofline define it.

References: NCCL-tests' PERFORMANCE.md: algorithm bandwidth = bytes / time; bus bandwidth = algbw x
2(n-1)/n for all-reduce, x (n-1)/n for all-gather and all-to-all (the per-link traffic of a ring, so
figures compare with the link speed across group sizes); a GEMM does 2·m·n·k FLOPs; a copy moves
2 x bytes (read + write); the host cost of an op is a forward + backward's time over the aten ops it
dispatched.
"""

from __future__ import annotations

import statistics

__all__ = ["BUS_FACTOR", "bus_gbps", "copy_gbps", "gemm_tflops", "median_seconds", "microseconds_per_op"]

BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}


def median_seconds(samples: list[float]) -> float:
    return statistics.median(samples)


def gemm_tflops(m: int, n: int, k: int, seconds: float) -> float:
    return 2 * m * n * k / seconds / 1e12


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
