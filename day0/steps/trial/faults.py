"""Fault drills for step 5: training bugs injected on purpose, to prove that the trial's checks
catch them (each must make step 5 fail) and that crashes and node loss resume from a checkpoint.

    DAY0_TRIAL_FAULTS='{"nan_at_step": 5}' day0 run configs/pipelines/tiny-local.yaml  # step 5 fails

Contract: `TrialFaults` is a `day0.steps.trial.loop.LoopHooks`, so it reaches the Ray Train workers with
the loop, as data inside the trial's request (the variable itself never reaches a cluster job).
`FaultDrillSettings` reads `DAY0_TRIAL_FAULTS` in the flow's process only; a drilled run's trial result
says so in its notes, and its result is never reused by a run without the same drill.
"""

from __future__ import annotations

import time

import torch
from pydantic import BaseModel, ConfigDict, Field, Json

from day0.settings import EnvSettings
from day0.steps.trial.loop import LoopHooks

__all__ = ["FaultDrillSettings", "TrialFaults"]


class TrialFaults(BaseModel, LoopHooks):
    """Training bugs injected on purpose; the defaults inject nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    loss_scale: float = Field(1.0, description="Multiply the loss (a wrong loss-scaling bug).")
    lr_multiplier: float = Field(1.0, description="Multiply the learning rate (e.g. x10).")
    skip_optimizer_step: bool = Field(False, description="Never apply the update (a broken optimizer step).")
    nan_at_step: int | None = Field(
        None,
        ge=0,
        description="Make the loss NaN at this 0-based step (training diverges: the weights turn NaN from there on).",
    )
    crash_at_step: int | None = Field(
        None,
        ge=0,
        description="Raise at this 0-based step if the attempt started before it (tests resume-after-crash).",
    )
    step_delay_s: float = Field(0.0, ge=0, description="Sleep per step (lets a test kill a node mid-run).")

    def describe(self) -> str:
        return "TrialFaults(" + ", ".join(f"{k}={v}" for k, v in self.model_dump(exclude_defaults=True).items()) + ")"

    def before_step(self, step: int, resumed_from: int) -> None:
        if step == self.crash_at_step and resumed_from < step:
            raise RuntimeError(f"injected crash at step {step} (TrialFaults.crash_at_step)")

    def learning_rate(self, step: int, lr: float) -> float:
        return lr * self.lr_multiplier

    def loss(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        return loss * (float("nan") if step == self.nan_at_step else self.loss_scale)

    def apply_update(self, step: int) -> bool:
        return not self.skip_optimizer_step

    def after_step(self, step: int) -> None:
        if self.step_delay_s:
            time.sleep(self.step_delay_s)


class FaultDrillSettings(EnvSettings):
    """A fault drill from the environment (`DAY0_TRIAL_FAULTS`, JSON)."""

    env_prefix = "DAY0_"

    trial_faults: Json[TrialFaults] | None = Field(
        None, description="Faults the trial task injects into the candidate's training, e.g. '{\"nan_at_step\": 5}'."
    )
