"""The stated uncertainty of a predicted step time: a band from the validation errors of the profile the
prediction was made with (issue 39, item 5).

Contract: pure. `VALIDATION_ERRORS[key]` holds the signed step-time errors, (predicted - published) /
published, over the published training runs a profile was validated on, sorted: under "all" every run of the
table, under a software profile's name (`planner.software`) the runs of that software. They are data written
by `python -m benchmarks.bench_planner --validation` from tests/data/planner/published_runs.yaml
(tests/unit/parallel/test_published_runs.py fails when the committed figures drift from the table).
`step_time_band(profile, software)` turns them into factors: a run whose step the model predicts at t took
t / (1 + e), so the central `COVERAGE` of the errors, e from its lower to its upper quantile, gives the band
[t / (1 + e_hi), t / (1 + e_lo)]. Without a software profile, or with one that no run of the table used, the
band is every run's (any software), and says so; a calibrated hardware profile has no published validation of
its own: its band is the datasheet figures' and says so.
"""

import statistics
from collections.abc import Sequence

from pydantic import BaseModel, Field

__all__ = ["COVERAGE", "VALIDATION_ERRORS", "StepTimeBand", "central_errors", "step_time_band"]

COVERAGE = 0.8  # the central 80% of the validation errors: one run in ten falls outside on each side

VALIDATION_ERRORS: dict[str, tuple[float, ...]] = {
    "all": (
        -0.561,
        -0.494,
        -0.361,
        -0.353,
        -0.338,
        -0.332,
        -0.331,
        -0.329,
        -0.324,
        -0.314,
        -0.302,
        -0.266,
        -0.257,
        -0.246,
        -0.236,
        -0.230,
        -0.228,
        -0.221,
        -0.215,
        -0.215,
        -0.212,
        -0.212,
        -0.205,
        -0.197,
        -0.186,
        -0.186,
        -0.176,
        -0.168,
        -0.159,
        -0.155,
        -0.150,
        -0.148,
        -0.148,
        -0.146,
        -0.135,
        -0.128,
        -0.126,
        -0.118,
        -0.113,
        -0.108,
        -0.106,
        -0.102,
        -0.100,
        -0.093,
        -0.090,
        -0.089,
        -0.082,
        -0.075,
        -0.075,
        -0.073,
        -0.073,
        -0.072,
        -0.072,
        -0.068,
        -0.064,
        -0.058,
        -0.057,
        -0.055,
        -0.051,
        -0.045,
        -0.041,
        -0.041,
        -0.032,
        -0.023,
        -0.020,
        -0.018,
        -0.016,
        -0.009,
        -0.008,
        -0.006,
        -0.006,
        -0.005,
        -0.005,
        -0.005,
        -0.002,
        +0.001,
        +0.011,
        +0.014,
        +0.016,
        +0.017,
        +0.030,
        +0.033,
        +0.033,
        +0.034,
        +0.038,
        +0.052,
        +0.064,
        +0.083,
        +0.101,
        +0.134,
        +0.136,
        +0.143,
        +0.147,
        +0.185,
        +0.322,
        +0.423,
    ),
    "llm-foundry-2023": (
        -0.338,
        -0.314,
        -0.215,
        -0.126,
        -0.009,
        +0.033,
    ),
    "megatron-core-2025": (
        -0.561,
        -0.353,
        -0.329,
        -0.324,
        -0.302,
        -0.257,
        -0.246,
        -0.236,
        -0.230,
        -0.228,
        -0.215,
        -0.212,
        -0.186,
        -0.176,
        -0.159,
        -0.155,
        -0.148,
        -0.146,
        -0.113,
        -0.102,
        -0.089,
        -0.075,
        -0.073,
        -0.072,
        -0.072,
        -0.064,
        -0.051,
        -0.041,
        -0.020,
        -0.018,
        -0.016,
        -0.006,
        -0.005,
        -0.005,
        -0.005,
        -0.002,
        +0.014,
        +0.017,
        +0.033,
        +0.034,
        +0.038,
        +0.052,
        +0.083,
        +0.101,
        +0.134,
        +0.136,
        +0.143,
        +0.147,
        +0.185,
        +0.322,
    ),
    "megatron-lm-2021": (
        -0.118,
        -0.106,
        -0.093,
        -0.082,
        -0.075,
        -0.073,
        -0.023,
        -0.008,
        -0.006,
        +0.001,
        +0.011,
        +0.016,
        +0.030,
        +0.064,
    ),
    "mindspeed-2025": (
        -0.494,
        -0.332,
        -0.135,
        -0.090,
        -0.058,
        +0.423,
    ),
    "torchtitan-fsdp2-2024": (
        -0.361,
        -0.331,
        -0.266,
        -0.221,
        -0.205,
        -0.197,
        -0.186,
        -0.168,
        -0.150,
        -0.148,
        -0.128,
        -0.100,
        -0.057,
        -0.045,
        -0.041,
        -0.032,
    ),
}


class StepTimeBand(BaseModel):
    """Where the actual step time of a predicted t lies, as factors of t, and what that rests on."""

    profile: str = Field(description="The hardware profile the prediction used: datasheet or calibrated.")
    software: str | None = Field(description="The software profile (planner.software), None: not stated.")
    runs: int = Field(description="Published runs whose errors the band is taken from.")
    coverage: float = Field(description="Share of those runs whose actual step the band would have held.")
    low_factor: float = Field(description="Lower edge over the predicted step time.")
    high_factor: float = Field(description="Upper edge over the predicted step time.")
    basis: str = Field(description="What the band rests on, in words.")

    def around(self, step_s: float) -> tuple[float, float]:
        return step_s * self.low_factor, step_s * self.high_factor

    def label(self, step_s: float) -> str:
        """`12.3 s (11.6-20.6 s)`: the prediction with its band."""
        low, high = self.around(step_s)
        return f"{step_s:.3g} s ({low:.3g}-{high:.3g} s)"


def central_errors(errors: Sequence[float]) -> tuple[float, float]:
    """The lower and upper quantile of the central `COVERAGE` of `errors`."""
    tail = (1 - COVERAGE) / 2
    cuts = statistics.quantiles(errors, n=round(1 / tail), method="inclusive")
    return cuts[0], cuts[-1]


def step_time_band(profile: str, software: str | None = None) -> StepTimeBand:
    """The band of a step time predicted under the hardware `profile` ("datasheet" or "calibrated") and the
    `software` profile (None: not stated)."""
    validated = software in VALIDATION_ERRORS
    errors = VALIDATION_ERRORS[software if validated and software else "all"]
    low_error, high_error = central_errors(errors)
    runs = f"{software} runs" if validated else "runs (any software)"
    basis = (
        f"{COVERAGE:.0%} of the {len(errors)} published {runs} the datasheet figures were validated on took "
        f"between {1 / (1 + high_error):.2f}x and {1 / (1 + low_error):.2f}x the predicted step time"
    )
    if software and not validated:
        basis += f" (no published {software} run in the table yet: every run's band)"
    if profile != "datasheet":
        basis += f" (no published validation of a {profile} profile yet: the datasheet figures' band)"
    return StepTimeBand(
        profile=profile,
        software=software,
        runs=len(errors),
        coverage=COVERAGE,
        low_factor=1 / (1 + high_error),
        high_factor=1 / (1 + low_error),
        basis=basis,
    )
