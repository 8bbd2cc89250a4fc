"""Step 2's section of the spec (`validation:`): the per-dtype tolerances, the least cosine similarity,
the reference dtype and the seeded input sets each operator is checked with, and whose standard
judges the ops (`tolerance: torch | msprobe`, with `msprobe_version`).

Two flat fields rather than one `tolerance: {policy: msprobe, version: ...}`: the version means
something only for msprobe, but a field that is a word or a mapping has two shapes to document,
validate and merge (a spec overlay setting the version alone would have to restate the policy).

Contract: `UserModel` rules (`day0.spec.base`); every figure within a bound named in its description.
"""

from typing import Literal

from pydantic import Field

from day0.core.precision import COMPUTE_DTYPES, DEFAULT_TOLERANCES, DType
from day0.spec.base import Text, UserModel

__all__ = ["DTypeTolerance", "ValidationSpec"]


class DTypeTolerance(UserModel):
    rtol: float = Field(gt=0, le=1, description="Relative tolerance (at most 1: 100%).")
    atol: float = Field(gt=0, le=1, description="Absolute tolerance (at most 1; torch.testing's defaults are 1e-5).")


def _default_tolerances() -> dict[DType, DTypeTolerance]:
    """The shared defaults (torch.testing.assert_close's) for the compute dtypes that have one."""
    return {
        d: DTypeTolerance(rtol=rtol, atol=atol) for d, (rtol, atol) in DEFAULT_TOLERANCES.items() if d in COMPUTE_DTYPES
    }


class ValidationSpec(UserModel):
    tolerances: dict[DType, DTypeTolerance] = Field(
        default_factory=_default_tolerances,
        description="Per-dtype (rtol, atol); default: torch.testing.assert_close's.",
    )
    min_cosine: float = Field(0.99, gt=0, le=1, description="Least cosine similarity to the reference for a pass.")
    reference_dtype: Literal["fp64", "fp32"] = Field("fp32", description="Dtype of the CPU reference computation.")
    seeds: int = Field(1, ge=1, le=1000, description="Seeded input sets per operator (at most 1000).")
    control_factor: float = Field(
        4.0,
        ge=1,
        le=100,
        description=(
            "An op or check beyond its dtype's tolerances still passes while its error is within this many "
            "times a control's at the same inputs, dtype and shapes (the host's stock kernel at the platform's "
            "dtype; for the training step, the host's own step at the compute dtype against fp32): at most 100."
        ),
    )
    max_model_params: int = Field(
        300_000_000,
        ge=1_000_000,
        le=100_000_000_000,
        description=(
            "Largest reduced-depth model the whole-model and training-step checks build (parameters; fp32 on "
            "the host, about 16 bytes each with copies and gradients): a larger one is checked on a slice, "
            "fewer experts, heads or vocabulary rows at the released widths."
        ),
    )
    production_elements: int = Field(
        1 << 25,
        ge=1 << 16,
        le=1 << 34,
        description=(
            "Per-call memory budget of the checks at the trial's and the training's shapes: inputs plus outputs, "
            "elements (the fp64 reference takes 8 bytes each); a wider call is sliced, token dimensions first."
        ),
    )
    production_seconds: float = Field(
        300.0,
        ge=0,
        le=86_400,
        description="Time budget of the checks at production shapes, seconds; ops left then are reported unchecked.",
    )
    tolerance: Literal["torch", "msprobe"] = Field(
        "torch",
        description=(
            "Whose standard judges each op: torch (torch.testing's per-dtype tolerances above) or msprobe "
            "(the standards of msprobe's api_accuracy_checker at msprobe_version, per op)."
        ),
    )
    msprobe_version: Text = Field(
        "26.2.0",
        pattern=r"^[0-9][0-9A-Za-z.+!-]*$",
        description="The mindstudio-probe release whose standards judge the ops when tolerance is msprobe.",
    )
