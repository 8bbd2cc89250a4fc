"""Regression against baselines: a snapshot of the validation layers for one model, and the pure
comparison of a current snapshot with the accepted baseline.

Contract: `Snapshot.from_results(...)` reads the step results (step 2's per-op errors and first
divergent layer, step 5's candidate loss curve and throughput) and keeps only what is compared.
`compare(baseline, current, tolerance)` returns one `Finding` per compared quantity; `regressed`
ones name the metric, both values and the change. Baselines and history live in the artifact store
under `regression/` (`RegressionStore`); a baseline is written only when asked (`accept`).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from day0.numerics.results import OperatorsResult
from day0.store import ArtifactStore
from day0.trial.results import TrialResult

__all__ = [
    "Finding",
    "RegressionStore",
    "RegressionTolerance",
    "Snapshot",
    "compare",
    "trend_report",
    "trend_rows",
]


class RegressionTolerance(BaseModel):
    """How much worse than the baseline still counts as unchanged."""

    model_config = ConfigDict(extra="forbid")

    op_error_ratio: float = Field(2.0, gt=1, description="An op's rel. RMS error may grow by this factor...")
    op_error_floor: float = Field(1e-6, ge=0, description="...or by this absolute amount, whichever is larger.")
    loss_mean_rel: float = Field(0.02, gt=0, description="Mean relative distance of the loss curve from baseline.")
    throughput_drop: float = Field(0.3, gt=0, lt=1, description="Allowed fractional drop of trial tokens/s.")


class Snapshot(BaseModel):
    model: str
    taken_at: dt.datetime
    op_errors: dict[str, float | None] = Field(description="'op@dtype' -> worst relative RMS error (None: not run).")
    op_status: dict[str, str] = Field(
        description="'op@dtype' -> the platform kernel's status: pass / fail / error / missing / skipped, or "
        "wrong_numbers when step 2 had to adapt around a kernel that gave wrong numbers."
    )
    op_problems: dict[str, str] = Field(default_factory=dict, description="'op@dtype' -> why it was adapted.")
    first_divergent: str | None = Field(description="First module over tolerance in the whole-model check.")
    loss: list[float] | None = Field(None, description="Trial candidate loss curve, if step 5 ran.")
    tokens_per_s: float | None = Field(None, description="Trial candidate steady-state throughput.")

    @classmethod
    def from_results(cls, model: str, ops: OperatorsResult | None, trial: TrialResult | None) -> Snapshot:
        errors: dict[str, float | None] = {}
        status: dict[str, str] = {}
        for check in ops.ops.checks if ops else []:
            name = f"{check.op}@{check.dtype}"
            errors[name] = check.metrics.rel_rmse if check.metrics else None
            status[name] = check.status
        problems = {}
        for adaptation in ops.ops.adaptations if ops else []:
            name = f"{adaptation.op}@{adaptation.dtype}"
            if adaptation.cause != "missing" and name in status:  # the platform's own kernel was wrong
                status[name], problems[name] = adaptation.cause, adaptation.problem
        return cls(
            model=model,
            taken_at=dt.datetime.now(dt.UTC),
            op_errors=errors,
            op_status=status,
            op_problems=problems,
            first_divergent=ops.layers.first_divergent if ops and ops.layers else None,
            loss=trial.candidate.loss if trial else None,
            tokens_per_s=trial.candidate.tokens_per_s if trial else None,
        )


class Finding(BaseModel):
    model: str
    metric: str
    baseline: Any
    current: Any
    change: str
    regressed: bool

    def __str__(self) -> str:
        return f"{self.model}: {self.metric} {self.change} (baseline {self.baseline}, now {self.current})"


def _op_findings(model: str, base: Snapshot, cur: Snapshot, tol: RegressionTolerance) -> list[Finding]:
    out = []
    for op, before in base.op_errors.items():
        after, was, now = cur.op_errors.get(op), base.op_status.get(op), cur.op_status.get(op)
        if now is None:
            out.append(
                Finding(
                    model=model, metric=op, baseline=before, current=None, change="no longer checked", regressed=True
                )
            )
            continue
        if before is not None and after is not None:
            worse = after > max(before * tol.op_error_ratio, before + tol.op_error_floor)
            ratio = after / before if before > 0 else math.inf
            change = f"error x{ratio:.3g} ({before:.3g} -> {after:.3g})"
        else:
            worse, change = False, f"error {before} -> {after}"
        if was == "pass" and now != "pass":
            worse, change = True, f"{was} -> {now}: {cur.op_problems.get(op, change)}"
        out.append(Finding(model=model, metric=op, baseline=before, current=after, change=change, regressed=worse))
    return out


def _curve_distance(base: list[float], cur: list[float]) -> float:
    """Mean |cur - base| / |base| over the common steps (the trial alignment metric, against history)."""
    pairs = list(zip(base, cur))
    return sum(abs(c - b) / max(abs(b), 1e-12) for b, c in pairs) / max(len(pairs), 1)


def compare(baseline: Snapshot, current: Snapshot, tolerance: RegressionTolerance) -> list[Finding]:
    model, findings = current.model, _op_findings(current.model, baseline, current, tolerance)
    if baseline.first_divergent != current.first_divergent:
        findings.append(
            Finding(
                model=model,
                metric="first divergent layer",
                baseline=baseline.first_divergent,
                current=current.first_divergent,
                change=f"{baseline.first_divergent} -> {current.first_divergent}",
                regressed=current.first_divergent is not None,
            )
        )
    if baseline.loss:
        if not current.loss:
            findings.append(
                Finding(
                    model=model,
                    metric="loss curve",
                    baseline=len(baseline.loss),
                    current=None,
                    change="not produced",
                    regressed=True,
                )
            )
        else:
            d = _curve_distance(baseline.loss, current.loss)
            findings.append(
                Finding(
                    model=model,
                    metric="loss curve",
                    baseline=0.0,
                    current=round(d, 6),
                    change=f"mean rel. distance {d:.3%} (limit {tolerance.loss_mean_rel:.1%})",
                    regressed=d > tolerance.loss_mean_rel or not math.isfinite(d),
                )
            )
    if baseline.tokens_per_s and current.tokens_per_s is not None:
        drop = 1 - current.tokens_per_s / baseline.tokens_per_s
        findings.append(
            Finding(
                model=model,
                metric="trial tokens/s",
                baseline=baseline.tokens_per_s,
                current=current.tokens_per_s,
                change=f"{-drop:+.1%}",
                regressed=drop > tolerance.throughput_drop,
            )
        )
    return findings


class RegressionStore:
    """`regression/baselines/<model>.json` and `regression/history/<model>/<utc time>.json`."""

    def __init__(self, store: ArtifactStore):
        self.store = store

    def baseline(self, model: str) -> Snapshot | None:
        key = f"regression/baselines/{model}.json"
        return Snapshot.model_validate(self.store.get_json(key)) if self.store.exists(key) else None

    def accept(self, snapshot: Snapshot) -> str:
        return self.store.put_json(f"regression/baselines/{snapshot.model}.json", snapshot.model_dump(mode="json"))

    def append(self, snapshot: Snapshot) -> None:
        stamp = snapshot.taken_at.strftime("%Y%m%dT%H%M%S%fZ")
        self.store.put_json(f"regression/history/{snapshot.model}/{stamp}.json", snapshot.model_dump(mode="json"))

    def history(self, model: str) -> list[Snapshot]:
        keys = self.store.list(f"regression/history/{model}/")
        return [Snapshot.model_validate(self.store.get_json(k)) for k in keys]


def trend_rows(history: list[Snapshot]) -> list[dict[str, Any]]:
    """One row per stored run: the worst op error, first divergent layer, final loss, throughput."""
    rows = []
    for snap in history:
        errors = [e for e in snap.op_errors.values() if e is not None]
        worst = max(snap.op_errors, key=lambda k: snap.op_errors[k] or 0.0) if errors else None
        rows.append(
            {
                "model": snap.model,
                "taken_at": snap.taken_at.isoformat(timespec="seconds"),
                "worst_op": worst,
                "worst_op_error": max(errors) if errors else None,
                "wrong_kernels": sum(s in ("fail", "error", "wrong_numbers") for s in snap.op_status.values()),
                "first_divergent": snap.first_divergent,
                "final_loss": snap.loss[-1] if snap.loss else None,
                "tokens_per_s": snap.tokens_per_s,
            }
        )
    return rows


def trend_report(model: str, history: list[Snapshot], findings: list[str]) -> tuple[str, bytes]:
    """The report section for one model (Markdown naming each regression, the trend table) and its plot."""
    from day0.plots import line_overlay

    rows = trend_rows(history)
    runs = list(range(1, len(rows) + 1))
    series = {"worst op rel. RMS error": (runs, [r["worst_op_error"] or 0.0 for r in rows])}
    series["platform kernels with wrong numbers"] = (runs, [float(r["wrong_kernels"]) for r in rows])
    png = line_overlay(f"{model}: validation over stored runs", series, "run", "value")
    cols = ["taken_at", "worst_op", "worst_op_error", "wrong_kernels", "first_divergent", "final_loss", "tokens_per_s"]
    lines = [
        f"## Regression: {model}",
        "",
        *(f"- **regressed**: {f}" for f in findings),
        *([] if findings else ["- no regression against the baseline"]),
        "",
        f"![trend]({model}.png)",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
        *(
            "| " + " | ".join(f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |"
            for r in rows
        ),
    ]
    return "\n".join(lines) + "\n", png
