"""Step 5's section of the spec (`trial:`): how the trial model is scaled down, how long and on how many
workers it trains, and when its loss curve counts as aligned with the reference's.

Contract: `UserModel` rules (`day0.spec.base`); every figure within a bound named in its description.
"""

import math

from pydantic import Field

from day0.spec.base import Text, UserModel

__all__ = ["CPU_REFERENCE", "DEFAULT_DATASET", "TrialScale", "TrialSpec", "TrialTolerance"]

DEFAULT_DATASET = "pydoc_data.topics"  # the CPython docs' topics, shipped with Python
CPU_REFERENCE = "cpu-fp32"  # the reference the trial trains itself: one CPU worker, fp32


class TrialScale(UserModel):
    layers: int | None = Field(None, ge=1, le=1024, description="Decoder layers of the scaled-down trial model.")
    hidden: int | None = Field(None, ge=8, le=131_072, description="Hidden size of the scaled-down trial model.")
    experts: int | None = Field(None, ge=1, le=65_536, description="Routed experts of the scaled-down trial model.")

    def scaled_width(self, width: int, hidden_size: int) -> int:
        """A width that depends on the hidden size (MLP, expert, LoRA rank) in the trial model: shrunk
        by the same factor as the hidden size, rounded up to a multiple of 8."""
        if not self.hidden:
            return width
        return max(8, math.ceil(width * (self.hidden / hidden_size) / 8) * 8)


class TrialTolerance(UserModel):
    """When two loss curves are aligned (the one model: `day0.steps.trial.alignment` judges by it).
    Limits follow public practice (mean relative error < 2% from step 21 on); the thresholds
    judged are tighter when the reference's own seed-to-seed spread says so (`noise_fraction`)."""

    loss_mean_rel: float = Field(
        0.02, gt=0, le=1, description="Limit of the mean relative loss error after warm-up (at most 1: 100%)."
    )
    grad_norm_median_rel: float = Field(
        0.25, gt=0, le=10, description="Limit of the median relative gradient-norm error after warm-up (at most 10)."
    )
    noise_fraction: float | None = Field(
        0.25,
        gt=0,
        le=1,
        description="Share of the reference's seed-to-seed spread (estimated from its own step-to-step residual) "
        "the candidate may drift; null: the limits alone.",
    )
    first_step_abs: float = Field(
        0.005,
        gt=0,
        le=100,
        description="First-step absolute loss difference (at most 100 nats: losses start near ln V).",
    )
    first_step_rel: float = Field(
        0.005,
        gt=0,
        le=1,
        description="First-step relative loss difference (either bound passing is enough; at most 1).",
    )
    warmup_steps: int = Field(20, ge=0, le=10_000_000, description="Leading steps excluded from the mean error.")


class TrialSpec(UserModel):
    scale: TrialScale = Field(
        default_factory=TrialScale, description="How the trial model is scaled down (same architecture)."
    )
    steps: int = Field(50, ge=1, le=10_000_000, description="Optimizer steps of each trial training.")
    workers: int = Field(1, ge=1, le=4096, description="Data-parallel workers of the candidate.")
    seq_len: int = Field(128, ge=8, le=1_000_000, description="Trial sequence length, tokens.")
    micro_batch: int = Field(4, ge=1, le=1_000_000, description="Sequences per worker per step.")
    learning_rate: float = Field(
        3e-4,
        gt=0,
        le=1,
        description="Peak learning rate (AdamW, linear warm-up); at most 1 (published AdamW peaks are 1e-5 to 1e-2).",
    )
    max_failures: int = Field(
        2, ge=0, le=100, description="Worker failures a training run recovers from (from its last checkpoint)."
    )
    checkpoint_every: int = Field(
        10, ge=1, le=10_000_000, description="Steps between checkpoints (resume and recovery points)."
    )
    seed: int = Field(
        0, ge=0, lt=2**32, description="Seed of weights and data order, shared by reference and candidate (32 bits)."
    )
    reference: Text = Field("cpu-fp32", description="'cpu-fp32' or a store URI of a saved curve.")
    dataset: Text | None = Field(None, description="Text file path/URI; default: pydoc_data.topics.")
    tolerance: TrialTolerance = Field(
        default_factory=TrialTolerance, description="When the two loss curves count as aligned."
    )
