"""Step-3 results: ranked plans with memory and time breakdowns, the infeasibility report, the chosen
plan as YAML in the pipeline's vocabulary (`parallel:`, `memory:`, `precision:`), and the verdict.

Contract: pydantic models, JSON-serialisable; bytes are plain bytes, times seconds. A `Plan` holds the
cost model's own values (`values.py`), not copies. `PlanReport` is step 3's `StepResult`: `fail` when no
plan fits (why, and the accelerators needed when known), else `pass` with the chosen degrees, memory
per accelerator against capacity, step time and MFU. `to_yaml()` writes the best plan (or an
infeasibility note); `to_markdown()` is the human report.
"""

from dataclasses import fields

from pydantic import BaseModel, Field

from day0.core.result import Judgement, StepResult
from day0.core.typing import JsonObject
from day0.planner.evaluate import PlanContext
from day0.planner.inputs import GIB, ClusterFigures, PlannerOptions
from day0.planner.stages import partition
from day0.planner.values import Degrees, MemoryEstimate, MemoryKnobs, TimeEstimate
from day0.spec.pipeline import TrainingSpec
from day0.yamlio import safe_dump

__all__ = [
    "MEMORY_TERMS",
    "ClusterPoint",
    "Infeasibility",
    "MemoryKnobs",
    "Plan",
    "PlanReport",
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

    def to_yaml_dict(self) -> JsonObject:
        dump = self.model_dump(include={"parallel", "memory_knobs"})
        return {
            "parallel": dump["parallel"],
            "memory": dump["memory_knobs"],
            "precision": dict(self.precision),
            "estimate": {
                "memory_gib": round(self.memory.total_bytes / GIB, 2),
                "step_s": round(self.time.step_s, 4),
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
    message: str


class Infeasibility(BaseModel):
    reason: str
    count: int
    min_memory_gib: float | None = None


class PlanReport(StepResult):
    STEP = "parallel"

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
    options: PlannerOptions = Field(
        default_factory=PlannerOptions,
        description="The assumptions used (last: duck-typed readers find the best plan's knobs first).",
    )

    @property
    def best(self) -> Plan | None:
        return self.plans[0] if self.plans else None

    def judge(self) -> Judgement:
        cap = self.cluster.hardware.memory_gib
        if self.best is None:
            headline = {"plan": f"none fits {self.cluster.accelerators} accelerators of {cap:g} GiB"}
            if self.closest_infeasible:
                headline["memory per accelerator"] = (
                    f"{self.closest_infeasible[0].memory.total_bytes / GIB:.1f} of {cap:g} GiB (leanest setup)"
                )
            if self.min_accelerators:
                headline["minimum accelerators"] = str(self.min_accelerators)
            return Judgement(verdict="fail", reasons=[self.message], headline=headline)
        p = self.best
        return Judgement(
            verdict="pass",
            headline={  # the first two are the scorecard's glance
                "degrees": degrees_label(p.parallel),
                "step time": f"{p.time.step_s:.3g} s",
                "memory per accelerator": f"{p.memory.total_bytes / GIB:.1f} of {cap:g} GiB",
                "MFU": f"{p.time.mfu:.1%}",
            },
        )

    def files(self) -> dict[str, bytes]:
        """plan.yaml, and memory.png: each memory term of the top three plans (the report embeds it)."""
        out = {"plan.yaml": self.to_yaml().encode()}
        if self.plans:
            from day0.plots import grouped_bars

            terms = [t for t in MEMORY_TERMS if any(getattr(p.memory, t) for p in self.plans[:3])]
            out["memory.png"] = grouped_bars(
                f"{self.model}: memory per accelerator by term (capacity {self.cluster.hardware.memory_gib:g} GiB)",
                [t.removesuffix("_bytes").replace("_", " ") for t in terms],
                {
                    f"#{p.rank} TP{p.parallel.tensor_parallel} PP{p.parallel.pipeline_parallel} "
                    f"EP{p.parallel.expert_parallel} {p.memory_knobs.recompute}": [
                        getattr(p.memory, t) / GIB for t in terms
                    ]
                    for p in self.plans[:3]
                },
                "GiB",
            )
        return out

    def to_yaml(self) -> str:
        if self.best is None:
            return safe_dump({"feasible": False, "reason": self.message, "min_accelerators": self.min_accelerators})
        head = f"# day0 plan for {self.model} on {self.cluster.accelerators} accelerators\n"
        return head + safe_dump(self.best.to_yaml_dict())

    def table(self, top: int = 10) -> str:
        """The ranked plans; when none fits, the closest setups first, each with why it does not fit."""
        from day0.planner.plan_text import plan_table

        return plan_table(self, top)

    def to_markdown(self, top: int = 10, images: bool = True) -> str:
        """The step's section; `images=False` leaves out the link to memory.png, for a caller that
        shows the text without the step's files (`day0 plan` prints it)."""
        from day0.planner.plan_text import report_markdown

        return report_markdown(self, top, images)


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
