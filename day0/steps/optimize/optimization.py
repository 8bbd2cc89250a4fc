"""What the optimiser returns: the techniques chosen for a plan, the cumulative sequence that reaches it,
and the plan as framework configs (`frameworks.py`).

Contract: pydantic models, JSON-serialisable. `sequence` lists the plan it started from and the plan
after each technique applied, in order, so its deltas add up to the saving; `techniques` lists every
alternative against the final choice. The verdict and the text are step 4's (`day0.steps.optimize`).
"""

from pydantic import BaseModel, Field

from day0.core.typing import JsonObject
from day0.planner.frameworks import FrameworkConfigs
from day0.planner.inputs import CommSettings
from day0.planner.results import Plan
from day0.planner.uncertainty import StepTimeBand
from day0.yamlio import safe_dump

__all__ = ["Optimization", "SequenceStep", "TechniqueChoice", "TechniqueOption"]


class TechniqueOption(BaseModel):
    value: str
    feasible: bool
    memory_bytes: float
    memory_saved_bytes: float  # against the chosen value; negative = uses more
    step_s: float
    time_cost_s: float  # against the chosen value; negative = faster


class TechniqueChoice(BaseModel):
    technique: str
    chosen: str
    baseline: str = Field(description="The value meaning 'technique not used' (recompute none, ZeRO 0, off).")
    reason: str
    options: list[TechniqueOption]

    def effect(self) -> TechniqueOption | None:
        """The baseline's option: its `memory_saved_bytes`/`time_cost_s` negated are the chosen value's
        effect against not using the technique; None when chosen is the baseline or it was not searched."""
        return next((o for o in self.options if o.value == self.baseline and o.value != self.chosen), None)


class SequenceStep(BaseModel):
    """One row of step 4's cumulative sequence: the plan after this technique and every one above it."""

    after: str = Field(description="What this row adds (the first row: step 3's plan).")
    step_s: float
    delta_s: float = Field(description="Against the row above (0 for the first): the rows' deltas add up.")
    memory_bytes: float


class Optimization(BaseModel):
    """The techniques `choose_optimizations` chose for a plan, with the cumulative sequence that reaches
    it and the plan as framework configs. Step 4's result (`day0.steps.optimize.result`) adds the verdict."""

    model: str
    plan: Plan | None = Field(description="The plan with the chosen knobs; None when step 3 found no plan.")
    comm: CommSettings
    techniques: list[TechniqueChoice]
    step_before_s: float
    step_after_s: float
    memory_before_bytes: float
    memory_after_bytes: float
    skipped_reason: str | None = None
    sequence: list[SequenceStep] = Field(
        default=[],
        description="Step 3's plan, then after each technique applied in turn: the deltas sum to the saving.",
    )
    frameworks: FrameworkConfigs | None = Field(
        None, description="The chosen plan as Megatron-LM arguments and a torchtitan config."
    )
    band: StepTimeBand | None = Field(None, description="The step-time band of the profile (the plan's step_band_s).")

    def to_yaml_dict(self) -> JsonObject:
        if self.plan is None:
            return {"feasible": False, "reason": self.skipped_reason}
        out = self.plan.to_yaml_dict()
        out["communication"] = self.comm.model_dump()
        if self.frameworks is not None:
            out["frameworks"] = self.frameworks.to_yaml_dict()
        return out

    def to_yaml(self) -> str:
        return safe_dump(self.to_yaml_dict())
