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
