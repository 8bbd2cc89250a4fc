"""The planner's value types, one model per concept: parallel degrees, memory knobs, and the memory and
time estimates of one plan.

Contract: frozen, slotted pydantic dataclasses. The cost model builds them in its inner loop (cheap:
about a microsecond each) and the step-3/4 results hold the very same objects, so what the search
ranked is what `result.json` and `plan.yaml` say, under the pipeline's vocabulary (`tensor_parallel`,
`recompute`, ...). Field names carry their unit (`_bytes`, `_s`).
"""

from pydantic import computed_field
from pydantic.dataclasses import dataclass

from day0.core.recompute import RECOMPUTES

__all__ = ["OFFLOADS", "RECOMPUTES", "Degrees", "MemoryEstimate", "MemoryKnobs", "TimeEstimate"]

OFFLOADS = ("none", "optimizer", "activations", "optimizer+activations")


@dataclass(frozen=True, slots=True)
class Degrees:
    """Parallel degrees of one plan; accelerators = TP x PP x CP x DP (EP and expert-TP fold into those)."""

    tensor_parallel: int
    pipeline_parallel: int
    virtual_pipeline_stages: int
    expert_parallel: int
    expert_tensor_parallel: int
    context_parallel: int
    data_parallel: int
    micro_batch: int
    num_microbatches: int

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented computed-field form
    @property
    def accelerators(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel * self.context_parallel * self.data_parallel

    @property
    def dense_replicas(self) -> int:
        """Data-parallel replicas of a dense parameter (DP x CP): what ZeRO shards it over."""
        return self.data_parallel * self.context_parallel

    @property
    def expert_replicas(self) -> int:
        """Replicas of a routed-expert parameter: TP x CP x DP ranks hold EP x expert-TP shards."""
        return (
            self.tensor_parallel
            * self.context_parallel
            * self.data_parallel
            // (self.expert_parallel * self.expert_tensor_parallel)
        )


@dataclass(frozen=True, slots=True)
class MemoryKnobs:
    """The memory techniques of a plan (the pipeline's `memory:` block)."""

    recompute: str
    zero_stage: int
    offload: str


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Bytes per accelerator on the peak pipeline stage. The terms from `weights_bytes` to
    `fragmentation_reserve_bytes` sum to `total_bytes`; `activations_bytes` already multiplies the
    in-flight micro-batches."""

    peak_stage: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_states_bytes: float
    embedding_head_bytes: float  # weights + grads + optimizer of embedding/head on this stage
    activations_bytes: float  # stored activations of all in-flight micro-batches
    recompute_working_bytes: float
    logits_bytes: float
    comm_buffers_bytes: float
    framework_bytes: float
    fragmentation_reserve_bytes: float
    total_bytes: float
    capacity_bytes: float
    inflight_microbatches: float
    activations_per_microbatch_bytes: float
    host_offload_bytes: float
    host_capacity_bytes: float

    @property
    def feasible(self) -> bool:
        return self.total_bytes <= self.capacity_bytes and self.host_offload_bytes <= self.host_capacity_bytes


@dataclass(frozen=True, slots=True)
class TimeEstimate:
    """Seconds per optimizer step; comm terms on the slowest stage, before overlap unless marked exposed.
    The critical-path parts sum to `step_s` (`results.time_terms` lists them, with what hides the rest):
    compute + recompute + the exposed TP/EP/CP comm + exposed host dispatch + pp comm + offload + bubble
    + exposed DP + optimizer."""

    compute_s: float
    recompute_s: float
    tp_comm_s: float
    ep_comm_s: float
    cp_comm_s: float
    pp_comm_s: float
    bubble_s: float
    dp_comm_exposed_s: float
    optimizer_s: float
    offload_s: float
    step_s: float
    tokens_per_s: float
    mfu: float  # model FLOPs / (step time x accelerators x peak of the GEMM dtype used)
    model_tflops_per_step: float
    tp_comm_exposed_s: float = 0.0  # what of tp_comm_s is on the critical path (overlap and SM slowdown)
    ep_comm_exposed_s: float = 0.0
    cp_comm_exposed_s: float = 0.0  # beyond the attention of the remote K/V blocks it overlaps
    host_dispatch_s: float = 0.0  # host time dispatching the slowest stage's ops
    host_dispatch_exposed_s: float = 0.0  # of which beyond the device's busy time (all of it when synchronous)
    dp_comm_s: float = 0.0  # data-parallel sync before overlap
