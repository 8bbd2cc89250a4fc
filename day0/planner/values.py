"""Value types of the cost model: parallel degrees, memory knobs, and the memory/time estimates.

Contract: frozen, slotted dataclasses (cheap in the search's inner loop); pydantic views of them live in
`results.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OFFLOADS", "RECOMPUTES", "Degrees", "Knobs", "MemoryEstimate", "TimeEstimate"]

RECOMPUTES = ("none", "selective", "full")
OFFLOADS = ("none", "optimizer", "activations")


@dataclass(frozen=True, slots=True)
class Degrees:
    tp: int
    pp: int
    vpp: int
    cp: int
    ep: int
    etp: int
    dp: int
    micro_batch: int
    num_microbatches: int

    @property
    def accelerators(self) -> int:
        return self.tp * self.pp * self.cp * self.dp


@dataclass(frozen=True, slots=True)
class Knobs:
    zero_stage: int
    recompute: str
    offload: str


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Bytes on the peak pipeline rank; `activations` already multiplies the in-flight micro-batches."""

    rank: int
    weights: float
    gradients: float
    optimizer_states: float
    embedding_head: float
    activations: float
    inflight_microbatches: float
    activations_per_microbatch: float
    recompute_working: float
    logits: float
    comm_buffers: float
    framework: float
    fragmentation_reserve: float
    total: float
    capacity: float
    host: float
    host_capacity: float

    @property
    def feasible(self) -> bool:
        return self.total <= self.capacity and self.host <= self.host_capacity


@dataclass(frozen=True, slots=True)
class TimeEstimate:
    compute: float
    recompute: float
    tp_comm: float
    ep_comm: float
    cp_comm: float
    pp_comm: float
    bubble: float
    dp_comm: float
    optimizer: float
    offload: float
    step: float
    tokens_per_s: float
    mfu: float
    model_flops: float
