"""Step 5's result: both loss curves (each with the device, dtype and workers it ran on), their
alignment, checkpoints/resume, failures and recoveries, peak memory beside the estimate;
`to_markdown()` for the report and `files()` for the overlay plot.

Verdict (`judge`): fail when the curves do not align within `trial.tolerance` or a run errored;
warn when the two curves are identical (the comparison then proves nothing); else pass.
"""

from __future__ import annotations

import datetime as dt
import statistics
from itertools import pairwise
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from day0.core.result import Judgement, StepResult
from day0.core.typing import HFConfigDict
from day0.steps.trial.alignment import AlignmentReport
from day0.steps.trial.cost_check import CostCheck
from day0.steps.trial.loop import LoopStep
from day0.steps.trial.ray_train import RunEvent, TrainingRun

__all__ = [
    "CostCheck",
    "MemoryComparison",
    "Recovery",
    "TrainingRunSummary",
    "TrialCurve",
    "TrialResult",
    "recoveries",
    "steady_tokens_per_s",
    "summarize_run",
]


class TrialCurve(BaseModel):
    """A loss curve with how it was produced; saved alone, it can serve as a later run's reference.
    A diverged curve holds NaN, saved in JSON as the string "NaN"."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    label: str
    platform: str
    device: str = Field("cpu", description="Torch device type the curve was trained on.")
    kernels: str = Field("stock", description="The kernels it ran on: stock, or the platform's table and its calls.")
    compute_dtype: str
    workers: int
    sharding: str = "ddp"
    recompute: str = "none"
    steps: list[int]
    loss: list[float]
    grad_norm: list[float]
    tokens_per_s: float | None = Field(None, description="Steady state: tokens per step / median step time.")

    @classmethod
    def from_history(
        cls,
        history: list[LoopStep],
        label: str,
        platform: str,
        compute_dtype: str,
        workers: int,
        **how: str | float | None,
    ) -> TrialCurve:
        """The curve of a run's steps; `how` sets the other fields (device, kernels, sharding, ...)."""
        return cls.model_validate(
            {
                "label": label,
                "platform": platform,
                "compute_dtype": compute_dtype,
                "workers": workers,
                "steps": [h.step for h in history],
                "loss": [h.loss for h in history],
                "grad_norm": [h.grad_norm for h in history],
                **how,
            }
        )

    def describe(self) -> str:
        """Where and how it ran, e.g. `cpu bf16 x2 (ddp)`."""
        extra = ", ".join(
            x
            for x in (
                self.sharding if self.workers > 1 else "",
                f"recompute {self.recompute}" if self.recompute != "none" else "",
            )
            if x
        )
        return f"{self.device} {self.compute_dtype} x{self.workers}" + (f" ({extra})" if extra else "")


class Recovery(BaseModel):
    failed_at: float = Field(description="Unix time the failure was seen (node kill or Train controller).")
    restarted_at: float = Field(description="Unix time the replacement worker group started.")
    resumed_from_step: int
    first_step_at: float | None = None
    recovery_s: float | None = Field(None, description="From the failure to the first step after resuming.")
    detail: str | None = None


class MemoryComparison(BaseModel):
    rank: int
    measured_peak_bytes: int = Field(description="Process peak (CPU: max RSS; CUDA: max allocated).")
    measured_training_bytes: int = Field(description="Peak minus the process's footprint before the model.")
    measured_tensor_bytes: int | None = Field(
        None,
        description="Parameters, gradients, optimizer states and saved activations counted from the tensors: "
        "what the cost model's memory terms describe (RSS growth also holds allocator caches and library pages).",
    )
    estimate_bytes: float | None = None
    estimate_source: str = "none"


class TrainingRunSummary(BaseModel):
    role: Literal["reference", "candidate"]
    name: str
    storage_uri: str
    steps_executed: int
    resumed_from_step: int
    attempts: int
    wall_s: float
    error: str | None = None
    checkpoint_path: str | None = None
    events: list[RunEvent] = Field(default=[])


def steady_tokens_per_s(history: list[LoopStep], skip: int = 2) -> float | None:
    """Tokens per step over the median step time, skipping each curve's first `skip` steps (start-up)."""
    times = [h.step_time_s for h in history[skip:]] or [h.step_time_s for h in history]
    return history[0].tokens / statistics.median(times) if times else None


def recoveries(events: list[RunEvent]) -> list[Recovery]:
    """Pair each failure (a node kill if recorded, else the controller's report) with the next restart."""
    out: list[Recovery] = []
    starts = [e for e in events if e.kind == "started" and e.rank == 0]
    failures = [e for e in events if e.kind in ("node_killed", "failure")]
    for prev, start in pairwise(starts):
        before = [f for f in failures if prev.time <= f.time <= start.time]
        if not before:
            continue
        first = next((e.time for e in events if e.kind == "first_step" and e.rank == 0 and e.time >= start.time), None)
        failed = before[0]
        out.append(
            Recovery(
                failed_at=failed.time,
                restarted_at=start.time,
                resumed_from_step=start.from_step or 0,
                first_step_at=first,
                recovery_s=(first - failed.time) if first else None,
                detail="; ".join(f"{f.kind}: {f.detail or ''}".strip() for f in before),
            )
        )
    return out


def summarize_run(role: Literal["reference", "candidate"], run: TrainingRun) -> TrainingRunSummary:
    return TrainingRunSummary(
        role=role,
        name=run.name,
        storage_uri=run.storage_uri,
        steps_executed=run.steps_executed,
        resumed_from_step=run.resumed_from_step,
        attempts=len(run.starts),
        wall_s=run.wall_s,
        error=run.error,
        checkpoint_path=run.checkpoint_path,
        events=run.events,
    )


def _t(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M:%S.%f")[:-3] + "Z"


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**20:,.1f} MiB"


class TrialResult(StepResult):
    """Step 5's result (see the module docstring for the verdict)."""

    STEP: ClassVar[str] = "trial"

    model: str
    scaled: dict[str, int | None] = Field(description="layers, hidden, experts, vocab, parameters of the trial model.")
    scaled_config: HFConfigDict = Field(
        default={}, description="The scaled-down model's HF config (what the memory estimate models)."
    )
    dataset: str
    seq_len: int
    global_batch: int
    steps: int
    reference: TrialCurve
    candidate: TrialCurve
    alignment: AlignmentReport
    runs: list[TrainingRunSummary]
    recoveries: list[Recovery] = Field(default=[])
    memory: list[MemoryComparison] = Field(default=[])
    cost_check: CostCheck | None = Field(None, description="Step 3's prediction of this trial vs its measurement.")
    notes: list[str] = Field(default=[])
    seconds: float

    def with_memory_estimate(self, estimate_bytes: float | None, source: str) -> TrialResult:
        """This result with a memory estimate beside each measured peak (the task adds it after the job)."""
        memory = [
            m.model_copy(update={"estimate_bytes": estimate_bytes, "estimate_source": source}) for m in self.memory
        ]
        return self.model_copy(update={"memory": memory})

    def with_cost_check(
        self, predicted_step_s: float, predicted_peak_bytes: float, source: str, calibrate_command: str | None = None
    ) -> TrialResult:
        """This result with step 3's prediction of its candidate beside the measured step time and peak
        (`calibrate_command`: what gives the calibrated figure, shown when `source` is the datasheet)."""
        tps = self.candidate.tokens_per_s
        counted = [m.measured_tensor_bytes for m in self.memory if m.measured_tensor_bytes]
        measured = max(counted or [m.measured_training_bytes for m in self.memory], default=None)
        check = CostCheck(
            source=source,
            predicted_step_s=predicted_step_s,
            measured_step_s=self.global_batch * self.seq_len / tps if tps else None,
            predicted_peak_bytes=predicted_peak_bytes,
            measured_peak_bytes=measured,
            calibrate_command=calibrate_command,
        )
        return self.model_copy(update={"cost_check": check})

    def judge(self) -> Judgement:
        a, ref, cand = self.alignment, self.reference, self.candidate
        errors = [f"{r.role} training failed after {r.attempts} attempt(s): {r.error}" for r in self.runs if r.error]
        reasons = [
            *a.failures,
            *errors,
            *_passed_checks(a),
            *([why] if self.cost_check and (why := self.cost_check.reason()) else []),
            f"final loss: reference {ref.loss[-1]:.4f} ({ref.describe()}), candidate {cand.loss[-1]:.4f} "
            f"({cand.describe()}), difference {a.final_loss_diff:+.4f}",
        ]
        cost = {f"cost model {k}": v for k, v in self.cost_check.describe().items()} if self.cost_check else {}
        headline = {  # the first two are the scorecard's glance
            "loss mean rel error": f"{a.loss_mean_rel_error:.3%} (< {a.loss_threshold:.2%})",
            **({"cost model step time": cost.pop("cost model step time")} if cost else {}),
            "final loss": f"reference {ref.loss[-1]:.4f}, candidate {cand.loss[-1]:.4f}",
            "reference": ref.describe(),
            "candidate": cand.describe(),
            "recoveries": str(len(self.recoveries)),
            **cost,
        }
        if a.parted_at_step is not None:
            headline["curves part at"] = f"step {a.parted_at_step} ({a.parted_metric})"
        if errors or not a.passed:
            return Judgement(verdict="fail", reasons=reasons, headline=headline)
        if a.loss_max_abs_diff == 0:
            reasons.insert(
                0,
                f"the two curves are identical at all {a.steps_compared} steps: the comparison proves "
                "nothing (candidate and reference ran the same numerics)",
            )
            return Judgement(verdict="warn", reasons=reasons, headline=headline)
        return Judgement(verdict="pass", reasons=reasons, headline=headline)

    def files(self) -> dict[str, bytes]:
        """loss.png: both curves with the tolerance band, and their relative difference against it."""
        from day0.steps.trial.plot import Curve, loss_plot

        ref, cand = (Curve(c.label, c.steps, c.loss) for c in (self.reference, self.candidate))
        return {"loss.png": loss_plot(self.model, ref, cand, self.alignment)}

    def to_markdown(self) -> str:
        s = self.scaled
        lines = [
            f"# Step 5: trial training of `{self.model}`: **{self.verdict.upper()}**",
            "",
            *[f"- {r}" for r in self.reasons],
            "",
            f"- trial model: {s.get('layers')} layers, hidden {s.get('hidden')}, {s.get('experts')} experts, "
            f"vocab {s.get('vocab')}, {s.get('parameters') or 0:,} parameters",
            f"- data: {self.dataset}, {self.steps} steps x {self.global_batch} sequences x {self.seq_len} tokens "
            "(the same sequences in the same order for both curves)",
            *[f"- note: {n}" for n in self.alignment.notes + self.notes],
            "",
            "![loss curves](loss.png)",
            "",
            *_curves_table(self.reference, self.candidate),
            "",
            *_alignment_table(self.alignment),
            "",
            *self._runs_section(),
        ]
        if self.recoveries:
            lines += [
                "",
                "## Failures and recoveries",
                "",
                "| failed at | restarted at | resumed from step | recovery | what |",
                "|---|---|---:|---:|---|",
            ]
            lines += [
                f"| {_t(r.failed_at)} | {_t(r.restarted_at)} | {r.resumed_from_step} | "
                f"{'-' if r.recovery_s is None else f'{r.recovery_s:.1f} s'} | {r.detail or ''} |"
                for r in self.recoveries
            ]
        if self.memory:
            lines += [
                "",
                "## Peak memory per candidate worker",
                "",
                "| rank | process peak | RSS growth | counted from the tensors | estimate | estimate from |",
                "|---:|---:|---:|---:|---:|---|",
            ]
            lines += [
                f"| {m.rank} | {_mib(m.measured_peak_bytes)} | {_mib(m.measured_training_bytes)} | "
                f"{_mib(m.measured_tensor_bytes)} | {_mib(m.estimate_bytes)} | {m.estimate_source} |"
                for m in self.memory
            ]
        return "\n".join(lines) + "\n"

    def _runs_section(self) -> list[str]:
        speed = {"reference": self.reference.tokens_per_s, "candidate": self.candidate.tokens_per_s}
        lines = [
            "## Runs",
            "",
            "| run | steps executed | resumed from | attempts | wall | tokens/s | error |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        lines += [
            f"| {r.role} (`{r.name}`) | {r.steps_executed} | {r.resumed_from_step} | {r.attempts} | "
            f"{r.wall_s:.0f} s | {speed[r.role] or 0:,.0f} | {r.error or ''} |"
            for r in self.runs
        ]
        paths = ", ".join(f"`{r.checkpoint_path}`" for r in self.runs if r.checkpoint_path)
        return [*lines, "", f"Checkpoints: {paths or 'none'}"]


def _passed_checks(a: AlignmentReport) -> list[str]:
    """One line with the numbers for each alignment check that passed (failed ones are in `failures`)."""
    tol, out = a.tolerance, []
    if a.loss_mean_ok:
        out.append(
            f"mean relative loss error from step {a.mean_window_start} on is {a.loss_mean_rel_error:.3%}, "
            f"within the {a.loss_threshold:.2%} tolerance"
        )
    if a.first_step_ok:
        out.append(
            f"first-step loss differs by {a.first_step_abs_diff:.4g} ({a.first_step_rel_diff:.3%}), within "
            f"{tol.first_step_abs:g} absolute or {tol.first_step_rel:.2%} relative"
        )
    if a.grad_norm_ok and a.grad_norm_median_rel_error is not None and a.grad_norm_threshold is not None:
        out.append(
            f"median relative grad-norm error from step {a.mean_window_start} on is "
            f"{a.grad_norm_median_rel_error:.3%}, within the {a.grad_norm_threshold:.2%} tolerance"
        )
    return out


def _curves_table(*curves: TrialCurve) -> list[str]:
    lines = [
        "| curve | platform | device | compute dtype | workers | sharding | recompute | final loss | kernels |",
        "|---|---|---|---|---:|---|---|---:|---|",
    ]
    return lines + [
        f"| {c.label} | {c.platform} | {c.device} | {c.compute_dtype} | {c.workers} | {c.sharding} | "
        f"{c.recompute} | {c.loss[-1]:.4f} | {c.kernels} |"
        for c in curves
    ]


def _alignment_table(a: AlignmentReport) -> list[str]:
    grad = "-" if a.grad_norm_mean_rel_error is None else f"{a.grad_norm_mean_rel_error:.3%}"
    median = "-" if a.grad_norm_median_rel_error is None else f"{a.grad_norm_median_rel_error:.3%}"
    grad_th = "-" if a.grad_norm_threshold is None else f"< {a.grad_norm_threshold:.2%}"
    noise = a.noise
    spread = (
        f"{noise.loss_spread_rel:.3%} loss, "
        + ("-" if noise.grad_norm_spread_rel is None else f"{noise.grad_norm_spread_rel:.3%}")
        + f" grad norm ({noise.residuals} steps' residuals)"
        if noise
        else "not estimated: the limits judge"
    )
    return [
        "| metric | value | tolerance |",
        "|---|---:|---:|",
        f"| mean relative loss error (step {a.mean_window_start}+) | {a.loss_mean_rel_error:.3%} | "
        f"< {a.loss_threshold:.2%} (limit {a.tolerance.loss_mean_rel:.2%}) |",
        f"| median relative grad-norm error (step {a.mean_window_start}+) | {median} | {grad_th} "
        f"(limit {a.tolerance.grad_norm_median_rel:.2%}) |",
        f"| reference seed-to-seed spread (estimated) | {spread} | x {a.tolerance.noise_fraction} |",
        f"| curves part at | {'-' if a.parted_at_step is None else f'step {a.parted_at_step} ({a.parted_metric})'} | |",
        f"| first-step difference | {a.first_step_abs_diff:.5f} ({a.first_step_rel_diff:.3%}) | "
        f"< {a.tolerance.first_step_abs} or {a.tolerance.first_step_rel:.2%} |",
        f"| max abs loss difference | {a.loss_max_abs_diff:.5f} (step {a.loss_max_abs_diff_step}) | |",
        f"| final-loss difference | {a.final_loss_diff:+.5f} | |",
        f"| grad-norm mean relative error | {grad} | |",
    ]
