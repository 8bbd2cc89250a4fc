"""Typed results of step 2, each renderable as Markdown for the report and Prefect artifacts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from day0.core.result import Judgement, StepResult, TableRow, Verdict
from day0.steps.operators.metrics import ErrorMetrics, worst_figures

if TYPE_CHECKING:
    from day0.platforms.kernels import MissingKernelError

__all__ = [
    "Adaptation",
    "LayerReport",
    "LayerRow",
    "OpCheck",
    "OpCheckReport",
    "OperatorsResult",
    "RealWeightsCheck",
    "ShapeCheck",
    "TokenShape",
    "TrainingStepCheck",
    "TrainingStepRow",
]

Status = Literal["pass", "fail", "missing", "error", "skipped"]
Kind = Literal["compute", "layout", "creation", "nondeterministic"]


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


class OpCheck(BaseModel):
    op: str
    dtype: str = Field(description="Platform dtype the op ran at ('int' for integer-only ops).")
    kind: Kind = "compute"
    status: Status
    reason: str = ""
    served_by: list[str] = Field(default=[], description="Kernels that ran: stock, vendor, plugin:x, adapt:y.")
    examples: int = Field(0, description="Example shapes checked (times seeds).")
    metrics: ErrorMetrics | None = Field(None, description="Worst over examples, seeds and outputs.")
    grad_status: Status | Literal["n/a"] = "n/a"
    grad_metrics: ErrorMetrics | None = None
    policy: str = Field(
        "torch",
        description=(
            "Whose standard judged the values and gradients: torch (torch.testing's per-dtype tolerances) or "
            "msprobe (<standard>...)."
        ),
    )
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "skipped") and self.grad_status in ("pass", "n/a", "skipped")


class Adaptation(BaseModel):
    op: str
    dtype: str
    problem: str = Field(description="Why it needed adapting: the missing kernel or the failed check.")
    cause: Literal["missing", "error", "wrong_numbers"] = Field(
        "missing", description="No kernel, a kernel that raised, or a kernel whose numbers are wrong."
    )
    strategy: str | None = Field(
        None, description="plugin | decomposition | upcast | cpu_fallback; None if nothing fixed it."
    )
    tried: list[str] = Field(default=[], description="Strategies tried, with why each was rejected.")
    overhead: float | None = Field(None, description="Estimated time relative to a native kernel (1.0 = same).")
    cost_note: str = ""
    recheck: OpCheck | None = None


class OpCheckReport(BaseModel):
    tolerance: str = Field(
        "torch", description="The policy asked for: torch, or msprobe <version> (<package> wheel sha256 ...)."
    )
    platform: str
    emulated_on: str | None = None
    compute_dtypes: list[str]
    reference_dtype: str
    seeds: int
    checks: list[OpCheck]
    adaptations: list[Adaptation] = Field(default=[])
    seconds: float
    ops_per_second: float

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.checks:
            key = c.status if c.grad_status not in ("fail", "error") else "fail"
            out[key] = out.get(key, 0) + 1
        return out

    @property
    def failing(self) -> list[OpCheck]:
        return [c for c in self.checks if not c.ok]

    def to_markdown(self) -> str:
        where = f" (emulated on {self.emulated_on})" if self.emulated_on else ""
        lines = [
            f"### Operator checks on `{self.platform}`{where}",
            f"{len(self.checks)} checks at {', '.join(self.compute_dtypes)} vs CPU {self.reference_dtype}, "
            f"{self.seeds} seed(s), {self.seconds:.1f} s ({self.ops_per_second:.1f} checks/s): "
            + ", ".join(f"{v} {k}" for k, v in sorted(self.counts().items())),
            f"Tolerance: {self.tolerance}"
            + (
                "" if self.tolerance == "torch" else "; an op msprobe does not judge keeps torch's (its policy says so)"
            ),
            "",
        ]
        by_policy = self.tolerance != "torch"  # under torch's policy every op is judged alike: no column for it
        lines += [
            "| op | dtype | kind | status | "
            + ("policy | " if by_policy else "")
            + "max abs | max rel | cosine | beyond tol | max ULP | grad | kernel | note |",
            "|---|---|---|---|" + ("---|" if by_policy else "") + "---|---|---|---|---|---|---|---|",
        ]
        order = {"fail": 0, "error": 1, "missing": 2, "pass": 3, "skipped": 4}
        for c in sorted(self.checks, key=lambda c: (order[c.status] if c.ok or c.status != "pass" else 0, c.op)):
            m = c.metrics
            figures = (m.max_abs, m.max_rel, m.cosine, m.share_beyond_tol, m.max_ulp) if m else (None,) * 5
            lines.append(
                f"| `{c.op}` | {c.dtype} | {c.kind} | **{c.status}** | "
                + (f"{c.policy} | " if by_policy else "")
                + f"{' | '.join(_g(x) for x in figures)} | {c.grad_status} | {', '.join(c.served_by)} "
                + f"| {c.reason[:80]} |"
            )
        if self.adaptations:
            lines += [
                "",
                "#### Adaptations",
                "| op | dtype | problem | strategy | after | est. overhead | tried |",
                "|---|---|---|---|---|---|---|",
            ]
            for a in self.adaptations:
                after = a.recheck.status if a.recheck else "-"
                lines.append(
                    f"| `{a.op}` | {a.dtype} | {a.problem[:60]} | {a.strategy or 'none'} | {after} | "
                    f"{_g(a.overhead)}x {a.cost_note} | {'; '.join(a.tried)[:120]} |"
                )
        return "\n".join(lines)


class LayerRow(BaseModel):
    module: str
    phase: Literal["forward", "backward", "param_grad"]
    metrics: ErrorMetrics
    passed: bool
    reason: str


class LayerReport(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="strings")  # a NaN loss is a finding: keep it in JSON

    model: str
    layers: int
    compute_dtype: str
    reference_dtype: str
    seed: int
    loss_reference: float
    loss_platform: float
    rows: list[LayerRow]
    first_divergent: str | None = Field(None, description="First module (forward order, then backward) over tolerance.")
    first_divergent_phase: str | None = None
    error: str | None = Field(None, description="Why the platform run did not complete, if it did not.")
    notes: list[str] = Field(default=[])
    seconds: float
    _missing: MissingKernelError | None = PrivateAttr(default=None)  # what stopped the run, if anything

    @property
    def passed(self) -> bool:
        return self.first_divergent is None and self.error is None

    def to_markdown(self) -> str:
        verdict = (
            "all layers within tolerance"
            if self.passed
            else f"run failed: {self.error}"
            if self.error
            else f"first divergent: **{self.first_divergent}** ({self.first_divergent_phase})"
        )
        lines = [
            (
                f"### Whole-model check: {self.model}, {self.layers} layer(s), {self.compute_dtype} vs "
                f"{self.reference_dtype}: {verdict}"
            ),
            f"loss reference {self.loss_reference:.6f}, platform {self.loss_platform:.6f}; {self.seconds:.1f} s",
            *(f"- note: {n}" for n in self.notes),
            "",
            "| module | phase | max abs | rel RMSE | cosine | beyond tol | NaN/Inf | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            m = r.metrics
            lines.append(
                f"| {r.module} | {r.phase} | {_g(m.max_abs)} | {_g(m.rel_rmse)} | {m.cosine:.6f} | "
                f"{_g(m.share_beyond_tol)} | {m.nan_inf_mismatch} | {'ok' if r.passed else '**' + r.reason + '**'} |"
            )
        return "\n".join(lines)


class TrainingStepRow(BaseModel):
    quantity: Literal["loss", "gradients", "update"]
    metrics: ErrorMetrics
    passed: bool
    reason: str


class TrainingStepCheck(BaseModel):
    """One step of the trial's recipe on the platform vs the host's stock kernels (`training_step`)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    compute_dtype: str
    loss_reference: float
    loss_platform: float | None = None
    rows: list[TrainingStepRow] = Field(default=[])
    ops: int = Field(0, description="Distinct aten ops the platform's step ran.")
    kernel_calls: dict[str, int] = Field(default={}, description="Calls per kernel source.")
    error: str | None = Field(None, description="Why the platform's step did not complete, if it did not.")
    seconds: float
    _missing: MissingKernelError | None = PrivateAttr(default=None)  # what stopped the run, if anything

    @property
    def passed(self) -> bool:
        return self.error is None and all(r.passed for r in self.rows)

    def reasons(self) -> list[str]:
        what = f"training step ({self.compute_dtype} autocast, the trial's recipe) on the platform"
        if self.error:
            return [f"{what} did not run: {self.error}"]
        return [
            f"{what}: {r.quantity} differ from the host's: RMS error {r.metrics.rel_rmse:.3g}, "
            f"cosine {r.metrics.cosine:.6f}: {r.reason}"
            for r in self.rows
            if not r.passed
        ]

    def to_markdown(self) -> str:
        state = "within tolerance" if self.passed else f"run failed: {self.error}" if self.error else "differs"
        calls = ", ".join(f"{k} {v}" for k, v in self.kernel_calls.items())
        lines = [
            f"### Training step: the trial's recipe at {self.compute_dtype} autocast on the platform vs the host: "
            f"{state}",
            f"loss host {self.loss_reference:.6f}, platform "
            + (f"{self.loss_platform:.6f}" if self.loss_platform is not None else "n/a")
            + f"; {self.ops} distinct ops ({calls}); {self.seconds:.1f} s",
        ]
        if self.rows:
            lines += ["", "| quantity | max abs | rel RMSE | cosine | verdict |", "|---|---|---|---|---|"]
            for r in self.rows:
                m = r.metrics
                lines.append(
                    f"| {r.quantity} | {_g(m.max_abs)} | {_g(m.rel_rmse)} | {m.cosine:.6f} | "
                    f"{'ok' if r.passed else '**' + r.reason + '**'} |"
                )
        return "\n".join(lines)


BUDGET_BYTES = 12 << 30
"""Host memory the real-weights layer check may use. Measured on the meta device: DeepSeek-V3's layer 3
(MLA attention, the shared and 4 routed experts, 1,024 vocabulary rows: 422M parameters) needs 11.0 GiB,
Kimi K2's 8.8 GiB, Qwen3-30B-A3B's 1.1 GiB; a whole MoE layer (DeepSeek-V3's 256 experts: 11B) would not fit."""
BYTES_PER_PARAM = 4 + 8 + 4 + 8 + 4  # fp32 as loaded, the fp64 reference and its gradients, the candidate and its


class RealWeightsCheck(BaseModel):
    """What the real-weights layer check read and how the layer compared."""

    directory: Path
    not_run: str | None = Field(None, description="Why the check did not run (no weights, over budget).")
    layer: int | None = Field(None, description="Decoder layer of the release that ran.")
    experts: str | None = Field(None, description="Routed experts kept, for an MoE layer.")
    vocab_rows: int | None = None
    files: list[str] = Field(default_factory=list, description="Shards read from.")
    tensors: int = Field(0, description="Tensors read (scales included).")
    bytes_read: int = 0
    dequantised: int = Field(0, description="FP8 tensors dequantised with their scales.")
    params: int = 0
    estimate_bytes: int = Field(0, description=f"Host memory the check needs: {BYTES_PER_PARAM} bytes a parameter.")
    budget_bytes: int = BUDGET_BYTES
    problems: list[str] = Field(default_factory=list, description="What is wrong, naming the file and tensor.")
    layers: LayerReport | None = None

    @property
    def passed(self) -> bool:
        return not self.problems and self.layers is not None and self.layers.passed

    def reasons(self) -> list[str]:
        """Step 2 fails on these: the release's tensors, or the layer diverging on the platform."""
        out = [f"real-weights layer: {p}" for p in self.problems]
        if self.layers is not None and self.layers.error:
            out.append(f"real-weights layer {self.layer} did not run on the platform: {self.layers.error}")
        elif self.layers is not None and not self.layers.passed:
            bad = next(r for r in self.layers.rows if not r.passed)
            out.append(
                f"real-weights layer diverges first at {bad.module} ({bad.phase}), {self.layers.compute_dtype} vs "
                f"{self.layers.reference_dtype}: RMS error {bad.metrics.rel_rmse:.3g}, cosine "
                f"{bad.metrics.cosine:.6f}: {bad.reason}"
            )
        return out

    def headline(self) -> str:
        if self.not_run:
            return f"not run: {self.not_run[:80]}"
        if self.problems:
            return f"{len(self.problems)} problems in the release's tensors"
        if self.layers is None:
            return "not run"
        verdict = "within tolerance" if self.layers.passed else "OUT of tolerance"
        return f"layer {self.layer} {verdict}" + (
            f" ({self.dequantised} FP8 tensors dequantised)" * bool(self.dequantised)
        )

    def to_markdown(self, random: LayerReport | None) -> str:
        """The read, then each module's error on real weights beside the random-weight check's."""
        head = "### A layer of the real weights: "
        if self.not_run:
            return head + f"not run\n\n{self.not_run}"
        gib = 1 << 30
        lines = [
            head + ("PROBLEMS" if self.problems else "within tolerance" if self.passed else "OUT of tolerance"),
            "",
            f"Decoder layer {self.layer} of `{self.directory}`"
            + (f", {self.experts}" if self.experts else "")
            + f", the first {self.vocab_rows} rows of the embedding and head: {self.tensors} tensors, "
            f"{self.bytes_read / 2**20:,.1f} MiB read from {len(self.files)} shard(s); {self.dequantised} FP8 tensors "
            f"dequantised (weight x weight_scale_inv per block); {self.params / 1e6:,.1f}M parameters, "
            f"estimated {self.estimate_bytes / gib:.2f} GiB within the budget of {self.budget_bytes / gib:.0f} GiB.",
        ]
        lines += [f"- PROBLEM: {p}" for p in self.problems]
        if (r := self.layers) is None:
            return "\n".join(lines)
        lines += [
            "",
            f"{r.compute_dtype} vs {r.reference_dtype}: loss reference {r.loss_reference:.6f}, platform "
            f"{r.loss_platform:.6f}; {r.seconds:.1f} s" + (f"; run failed: {r.error}" if r.error else ""),
            *(f"- note: {n}" for n in r.notes),
            "",
            "| module | phase | real: rel RMSE | real: cosine | real: max abs | random weights"
            + (f" (vs {random.reference_dtype})" if random else "")
            + ": rel RMSE | random: cosine | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for row in r.rows:
            m, twin = row.metrics, _random_twin(row, random, self.layer)
            lines.append(
                f"| {row.module} | {row.phase} | {m.rel_rmse:.3g} | {m.cosine:.6f} | {m.max_abs:.3g} | "
                + (f"{twin.metrics.rel_rmse:.3g} | {twin.metrics.cosine:.6f}" if twin else "- | -")
                + f" | {'ok' if row.passed else '**' + row.reason + '**'} |"
            )
        return "\n".join(lines)


def _random_twin(row: LayerRow, random: LayerReport | None, layer: int | None) -> LayerRow | None:
    """The random-weight check's row for the same module: its last decoder layer is the one kept here."""
    if random is None:
        return None
    module = row.module
    if layer is not None and module == f"layers.{layer}":
        module = f"layers.{random.layers - 1}"
    return next((r for r in random.rows if r.module == module and r.phase == row.phase), None)


class TokenShape(BaseModel):
    """Tokens one rank's step processes in production: `batch` sequences of `seq_len` tokens."""

    name: str = Field(description="Whose shape: trial or training.")
    batch: int = Field(ge=1)
    seq_len: int = Field(ge=1)

    def __str__(self) -> str:
        return f"the {self.name}'s {self.batch} x {self.seq_len} tokens"


class ShapeCheck(BaseModel):
    """The accumulating ops (GEMMs, grouped GEMMs, reductions, norms, softmax, attention,
    scatter/index_put) checked again at one production shape, as step 1 captured them at it."""

    shape: TokenShape
    checks: list[OpCheck] = Field(default=[])
    not_checked: list[str] = Field(default=[], description="Ops left out: the time budget ran out first.")
    max_elements: int = Field(description="The per-call budget: wider calls were sliced (tokens first).")
    seconds: float = 0.0

    @property
    def failing(self) -> list[OpCheck]:
        return [c for c in self.checks if not c.ok]

    def to_markdown(self) -> str:
        sliced = sum("shrunk to" in c.reason for c in self.checks)
        lines = [
            f"### At {self.shape}: {len(self.checks) - len(self.failing)} of {len(self.checks)} accumulating ops "
            f"pass ({sliced} sliced to {self.max_elements:,} elements a call; {self.seconds:.1f} s)",
            "",
        ]
        lines += [f"- **{_op_reason(c)}**" for c in self.failing]
        if self.not_checked:
            lines.append(f"- not checked (time budget): {', '.join(self.not_checked)}")
        return "\n".join(lines).rstrip()


class OperatorsResult(StepResult):
    """Step 2's result: per-op checks (with adaptations), the whole-model layer comparison and the
    training step. Verdict: `fail` when an op is left failing, erroring or without a kernel after adaptation, the
    whole-model check diverges or errors, or the training step errors or differs; `warn` when ops
    needed adapting or something was not checked (skipped ops, gradients, the whole model); `pass`
    otherwise. Unchecked ops are counted apart, never as passing."""

    STEP: ClassVar[str] = "operators"

    ops: OpCheckReport
    layers: LayerReport | None = None
    training_step: TrainingStepCheck | None = None
    real_weights: RealWeightsCheck | None = Field(
        None, description="One layer of the release's own weights (day0.steps.operators.real_weights)."
    )
    layers_live: LayerReport | None = Field(
        None, description="The whole-model check on the platform as shipped, when a wrong kernel was adapted."
    )
    training_step_live: TrainingStepCheck | None = Field(
        None, description="The training step on the platform as shipped, when a wrong kernel was adapted."
    )
    production: list[ShapeCheck] = Field(
        default=[], description="The accumulating ops again at the trial's and the training's token shapes."
    )
    notes: list[str] = Field(default=[])
    seconds: float = 0.0

    def judge(self) -> Judgement:
        checks = self.ops.checks
        failed = [c for c in checks if c.status in ("fail", "error") or c.grad_status in ("fail", "error")]
        missing = [c for c in checks if c.status == "missing"]
        skipped = [c for c in checks if c.status == "skipped"]
        grads_skipped = [c for c in checks if c.status not in ("skipped", "missing") and c.grad_status == "skipped"]
        adapted = [a for a in self.ops.adaptations if a.strategy]
        # A platform kernel with wrong numbers fails the step even when a fallback gets around it:
        # the kernel itself must be fixed. Missing kernels adapted around only warn.
        wrong = [a for a in adapted if a.cause == "wrong_numbers"]
        reasons = [_op_reason(c) for c in failed + missing] + _layer_reasons(self.layers)
        reasons += self.training_step.reasons() if self.training_step else []
        reasons += self.real_weights.reasons() if self.real_weights else []
        reasons += [f"as shipped (wrong kernels live): {r}" for r in _layer_reasons(self.layers_live)]
        reasons += [f"as shipped: {r}" for r in (self.training_step_live.reasons() if self.training_step_live else [])]
        reasons += [f"at {p.shape}: {_op_reason(c)}" for p in self.production for c in p.failing]
        reasons += [
            f"{a.op} at {a.dtype}: the platform's kernel gives wrong numbers ({a.problem[:120]}); "
            f"{a.strategy} works around it meanwhile"
            for a in wrong
        ]
        warnings = [
            line
            for line in (
                _listing("op(s) needed adapting", [f"{a.op} at {a.dtype} ({a.strategy})" for a in adapted]),
                _listing("op(s) not checked", [f"{c.op}: {c.reason[:80]}" for c in skipped]),
                _listing("gradient(s) not checked", [c.op for c in grads_skipped]),
                *(_listing(f"op(s) not checked at {p.shape} (time budget)", p.not_checked) for p in self.production),
            )
            if line
        ]
        if self.layers is None:
            why = [n for n in self.notes if n.startswith("whole-model check skipped")]
            warnings.append(why[0] if why else "whole-model check not run")
        verdict: Verdict = "fail" if reasons else "warn" if warnings else "pass"
        return Judgement(
            verdict=verdict,
            reasons=reasons + warnings,
            headline=self._headline(failed, missing + skipped, grads_skipped, adapted),
        )

    def _headline(
        self, failed: list[OpCheck], unchecked: list[OpCheck], grads_unchecked: list[OpCheck], adapted: list[Adaptation]
    ) -> dict[str, str]:
        checks = self.ops.checks
        dtype = self.ops.compute_dtypes[0] if self.ops.compute_dtypes else "-"
        at_dtype = [(c.op, c.metrics) for c in checks if c.metrics is not None and c.dtype == dtype]
        layer = _divergent(self.layers)
        if self.layers_live is not None:  # side by side: what the trial's live kernels give, and the adapted
            layer = f"as shipped {_divergent(self.layers_live)}; adapted {layer}"
        checked = len(checks) - len(unchecked)
        wrong = sum(a.cause == "wrong_numbers" for a in adapted)  # a pass after adapting hides these
        hidden = f" ({wrong} wrong kernel(s) worked around)" if wrong else ""
        return {  # the first two are the scorecard's glance
            "ops": f"{checked - len(failed)} of {checked} checked pass, {len(adapted)} adapted{hidden}",
            f"worst at {dtype}": worst_figures(at_dtype),
            "ops checked": str(checked),
            "passed": str(checked - len(failed)),
            "failed": str(len(failed)),
            "adapted": str(len(adapted)),
            "not checked": f"{len(unchecked)} ops, {len(grads_unchecked)} gradients",
            "first divergent layer": layer,
            "real-weights layer": self.real_weights.headline() if self.real_weights else "not run",
            "production shapes": "; ".join(
                f"{p.shape.name} {p.shape.batch} x {p.shape.seq_len}: {len(p.checks) - len(p.failing)} of "
                f"{len(p.checks)} pass"
                for p in self.production
            )
            or "not checked",
            "judged by": f"{self.ops.tolerance}: "
            + ", ".join(f"{n} {p}" for p, n in Counter(c.policy for c in checks).most_common()),
        }

    def _plot_layers(self) -> bool:
        return self.layers is not None and any(r.metrics.rel_rmse > 0 for r in self.layers.rows)

    def files(self) -> dict[str, bytes]:
        """layers.png: relative RMS error per module and phase, where a picture reads faster."""
        if not self._plot_layers():
            return {}
        from day0.plots import grouped_bars

        assert self.layers is not None
        modules = list(dict.fromkeys(r.module for r in self.layers.rows))
        series = {
            phase: [
                next(
                    (max(r.metrics.rel_rmse, 1e-12) for r in self.layers.rows if r.module == m and r.phase == phase),
                    1e-12,
                )
                for m in modules
            ]
            for phase in ("forward", "backward", "param_grad")
        }
        title = f"{self.layers.model}: {self.layers.compute_dtype} vs {self.layers.reference_dtype}, per module"
        return {"layers.png": grouped_bars(title, modules, series, "RMS error / RMS(reference)", log=True)}

    def artifact_table(self) -> list[TableRow]:
        return [
            {
                "op": c.op,
                "dtype": c.dtype,
                "status": c.status,
                "policy": c.policy,
                "grad": c.grad_status,
                "max_abs": c.metrics.max_abs if c.metrics else None,
                "cosine": c.metrics.cosine if c.metrics else None,
                "kernel": ", ".join(c.served_by),
            }
            for c in self.ops.checks
        ]

    def to_markdown(self) -> str:
        head = "## Step 2: operators and numerical alignment: " + self.verdict.upper()
        parts = [head, *(["\n".join(f"- note: {n}" for n in self.notes)] if self.notes else []), self.ops.to_markdown()]
        parts += [p.to_markdown() for p in self.production]
        if self.layers is not None:
            parts.append(self.layers.to_markdown())
            if self._plot_layers():
                parts.append("![per-module error](layers.png)")
        if self.real_weights is not None:
            parts.append(self.real_weights.to_markdown(self.layers))
        if self.training_step is not None:
            parts.append(self.training_step.to_markdown())
        if self.layers_live is not None or self.training_step_live is not None:
            parts.append(
                "### As shipped: the same checks with the platform's wrong kernels live (not adapted)\n\n"
                "The checks above ran on the adapted platform; a run with the vendor's kernels as they are "
                "gives these:"
            )
            parts += [x.to_markdown() for x in (self.layers_live, self.training_step_live) if x is not None]
        return "\n\n".join(parts)


def _divergent(layers: LayerReport | None) -> str:
    """The whole-model check's first divergent module, in a few words."""
    if layers is None:
        return "not run"
    if layers.error:
        return f"error: {layers.error[:60]}"
    return f"{layers.first_divergent} ({layers.first_divergent_phase})" if layers.first_divergent else "none"


def _listing(what: str, items: list[str]) -> str:
    return f"{len(items)} {what}: " + "; ".join(items) if items else ""


def _op_reason(c: OpCheck) -> str:
    """One line for an op left failing: what, at which dtype, with its numbers."""
    m = c.metrics if c.status != "pass" else c.grad_metrics
    numbers = (
        f"max abs {m.max_abs:.3g}, max rel {m.max_rel:.3g}, cosine {m.cosine:.6f}, RMS error {m.rel_rmse:.3g}: "
        if m is not None
        else ""
    )
    what = "gradient fails" if c.status == "pass" else {"missing": "no kernel, none adapted"}.get(c.status, c.status)
    return f"{c.op} at {c.dtype}: {what}: {numbers}{c.reason[:160]}"


def _layer_reasons(layers: LayerReport | None) -> list[str]:
    if layers is None:
        return []
    if layers.error:
        return [f"whole-model check ({layers.compute_dtype} vs {layers.reference_dtype}) did not run: {layers.error}"]
    bad = next((r for r in layers.rows if not r.passed), None)
    if bad is None:
        return []
    m = bad.metrics
    return [
        (
            f"whole-model check diverges first at {bad.module} ({bad.phase}), {layers.compute_dtype} vs "
            f"{layers.reference_dtype}: RMS error {m.rel_rmse:.3g}, cosine {m.cosine:.6f}, "
            f"max abs {m.max_abs:.3g}: {bad.reason}"
        )
    ]
