"""The fault catalogue (tests/data/faults/catalogue.yaml): what each fault injects and which layer is
expected to catch it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from day0.steps.trial.faults import TrialFaults
from testsupport.fault_matrix.results import Layer

__all__ = ["Catalogue", "Fault"]


class Fault(BaseModel):
    """One catalogue entry: what is injected and which layer is expected to catch it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    layer: Layer = Field(description="The layer expected to catch it.")
    description: str
    kernel: str | None = Field(None, description="Plugin entry point target `module:function` (a platform fault).")
    training: TrialFaults | None = Field(None, description="Training bugs injected through the loop's hooks.")
    workers: int = Field(1, ge=1, le=2, description="Data-parallel workers (2: the fault is in the all-reduce).")
    baseline_kernel: str | None = Field(None, description="The correct kernel a performance fault is timed against.")
    expect_at: str | None = Field(None, description="Where it should be localised (an op, or 'step N').")


class Catalogue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="Where the faults are modelled from.")
    faults: list[Fault]
