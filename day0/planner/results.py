"""What the search returns: ranked plans with memory and time breakdowns, the infeasibility report, and
the chosen plan as YAML in the pipeline's vocabulary (`parallel:`, `memory:`, `precision:`).

Contract: pydantic models, JSON-serialisable; bytes are plain bytes, times seconds. A `Plan` holds the
cost model's own values (`values.py`), not copies. `PlanSearch.to_yaml()` writes the best plan (or an
infeasibility note). The verdict and the text are step 3's (`day0.steps.parallel`).
"""

from dataclasses import fields

from pydantic import BaseModel, Field

from day0.core.typing import JsonObject
from day0.planner.evaluate import PlanContext
from day0.planner.inputs import GIB, ClusterFigures, PlannerOptions
from day0.planner.stages import partition
from day0.planner.uncertainty import StepTimeBand
from day0.planner.values import Degrees, MemoryEstimate, MemoryKnobs, TimeEstimate
from day0.spec.pipeline import TrainingSpec
from day0.yamlio import safe_dump

__all__ = [
    "MEMORY_TERMS",
    "ClusterPoint",
    "Infeasibility",
    "MemoryKnobs",
    "Plan",
    "PlanSearch",
    "degrees_label",
    "make_plan",
]


class Plan(BaseModel):
    rank: int = 0
    parallel: Degrees
    memory_knobs: MemoryKnobs
    precision: dict[str, str]
    memory: MemoryEstimate
    time: TimeEstimate
    feasible: bool
    reason: str | None = None
    layers_per_stage: list[int]
    chunk_layers: list[int] = Field(
        default=[], description="Layers of each pipeline chunk in order (chunk c on rank c mod PP)."
    )
    step_band_s: tuple[float, float] | None = Field(
        None, description="Where the actual step time lies, seconds: the band of its profile (`uncertainty`)."
    )

    def with_band(self, band: StepTimeBand | None) -> "Plan":
        return self if band is None else self.model_copy(update={"step_band_s": band.around(self.time.step_s)})

    def to_yaml_dict(self) -> JsonObject:
        dump = self.model_dump(include={"parallel", "memory_knobs"})
        return {
            "parallel": dump["parallel"],
            "memory": dump["memory_knobs"],
            "precision": dict(self.precision),
            "estimate": {
                "memory_gib": round(self.memory.total_bytes / GIB, 2),
                "step_s": round(self.time.step_s, 4),
                **({"step_band_s": [round(x, 4) for x in self.step_band_s]} if self.step_band_s else {}),
                "tokens_per_s": round(self.time.tokens_per_s),
                "mfu": round(self.time.mfu, 4),
            },
        }


def degrees_label(d: Degrees) -> str:
    """`TP2 PP4 (VPP2) EP8 (ETP2) CP1 DP16, micro-batch 1`: the degrees a person reads first."""
    vpp = f" (VPP{d.virtual_pipeline_stages})" if d.virtual_pipeline_stages > 1 else ""
    etp = f" (ETP{d.expert_tensor_parallel})" if d.expert_tensor_parallel > 1 else ""
    return (
        f"TP{d.tensor_parallel} PP{d.pipeline_parallel}{vpp} EP{d.expert_parallel}{etp} "
        f"CP{d.context_parallel} DP{d.data_parallel}, micro-batch {d.micro_batch}"
    )


class ClusterPoint(BaseModel):
    """The best plan at one size of an elastic cluster (its minimum or its maximum)."""

    label: str = Field(description="'elastic minimum' or 'elastic maximum', with the nodes of each pool.")
    accelerators: int
    feasible: bool
    degrees: str | None = None
    step_s: float | None = None
    memory_gib: float | None = None
    mfu: float | None = None
    step_band_s: tuple[float, float] | None = Field(None, description="The step time's band (`uncertainty`).")
    message: str


class Infeasibility(BaseModel):
    reason: str
    count: int
    min_memory_gib: float | None = None


class PlanSearch(BaseModel):
    """What the search found for a model on a cluster: the ranked plans, or why none fits, with the
    assumptions it used. Step 3's result (`day0.steps.parallel.result.PlanReport`) adds the verdict."""

    model: str
    params_total: int
    params_active: int
    cluster: ClusterFigures
    training: TrainingSpec
    feasible: bool
    message: str
    plans: list[Plan]
    closest_infeasible: list[Plan] = Field(
        default=[], description="When nothing fits: the leanest setups, with why not."
    )
    infeasible: list[Infeasibility]
    min_accelerators: int | None = None
    tuples_considered: int
    configurations_evaluated: int
    search_seconds: float
    notes: list[str] = Field(default=[])
    elastic: list[ClusterPoint] = Field(
        default=[], description="With an elastic pool: the best plan at its minimum and at its maximum."
    )
    advice: list[str] = Field(default=[], description="What to do next, one line each, with the numbers.")
    band: StepTimeBand | None = Field(
        None, description="The step-time band of the profile the plans were predicted with (each plan's step_band_s)."
    )
    options: PlannerOptions = Field(
        default_factory=PlannerOptions,
        description="The assumptions used (last: duck-typed readers find the best plan's knobs first).",
    )

    def with_band(self, band: StepTimeBand) -> "PlanSearch":
        """These plans, each with its step-time band."""
        elastic = [
            e if e.step_s is None else e.model_copy(update={"step_band_s": band.around(e.step_s)}) for e in self.elastic
        ]
        plans = [p.with_band(band) for p in self.plans]
        return self.model_copy(update={"band": band, "plans": plans, "elastic": elastic})

    @property
    def best(self) -> Plan | None:
        return self.plans[0] if self.plans else None

    def to_yaml(self) -> str:
        if self.best is None:
            return safe_dump({"feasible": False, "reason": self.message, "min_accelerators": self.min_accelerators})
        head = f"# day0 plan for {self.model} on {self.cluster.accelerators} accelerators\n"
        return head + safe_dump(self.best.to_yaml_dict())


MEMORY_TERMS = [
    f.name
    for f in fields(MemoryEstimate)
    if f.name.endswith("_bytes")
    and f.name
    not in (
        "total_bytes",
        "capacity_bytes",
        "activations_per_microbatch_bytes",
        "host_offload_bytes",
        "host_capacity_bytes",
    )
]


def make_plan(
    ctx: PlanContext, knobs: MemoryKnobs, m: MemoryEstimate, t: TimeEstimate, reason: str | None = None
) -> Plan:
    prec = ctx.training.precision
    return Plan(
        parallel=ctx.d,
        memory_knobs=knobs,
        precision={"master_weights": prec.master_weights, "compute": prec.compute},
        memory=m,
        time=t,
        feasible=m.feasible and reason is None,
        reason=reason,
        layers_per_stage=list(ctx.layers_per_rank),
        chunk_layers=list(
            partition(ctx.costs, ctx.d.pipeline_parallel * ctx.d.virtual_pipeline_stages, ctx.training.seq_len)
        ),
    )
