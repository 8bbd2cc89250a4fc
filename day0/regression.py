"""Regression against baselines: a snapshot of the validation layers for one model, and the pure
comparison of a current snapshot with the accepted baseline.

Contract: `Snapshot.from_results(...)` reads the step results (step 2's per-op errors and first
divergent layer, step 5's candidate loss curve and throughput) and keeps only what is compared.
`compare_snapshots(baseline, current, tolerance)` returns one `Finding` per compared quantity; `regressed`
ones name the metric, both values and the change. Baselines, history and the regression's own runs
live in the artifact store under `regression/` (`RegressionStore`), apart from every user's run:
`regression/runs/<model>/<UTC time>/...` (`run_namespace`). Baselines are versioned
(`regression/baselines/<model>/v<N>.json`): the first snapshot of a model becomes v1, and a new
version is written only when asked, keeping the earlier ones. `prune_runs` keeps the last N of a
model's regression runs and deletes the older ones through the store (checkpoints and all), except a run
that holds its run lock (still running) or that a baseline version was taken from.
"""

from __future__ import annotations

import datetime as dt
import logging
import math

from pydantic import BaseModel, ConfigDict, Field

from day0.core.curves import relative_errors
from day0.core.result import TableRow
from day0.errors import CorruptRecord
from day0.steps.operators.result import OperatorsResult
from day0.steps.trial.result import TrialResult
from day0.store import ArtifactStore

__all__ = [
    "Baseline",
    "Finding",
    "PrunedRun",
    "RegressionRetention",
    "RegressionStore",
    "RegressionTolerance",
    "Snapshot",
    "compare_snapshots",
    "prune_runs",
    "run_namespace",
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


class RegressionRetention(BaseModel):
    """How many of a model's regression runs the store keeps (each holds its trial checkpoints)."""

    model_config = ConfigDict(extra="forbid")

    keep_runs: int = Field(
        14,
        ge=1,
        description="The latest runs kept per model; older ones are deleted, except a baseline's run and a "
        "run that holds its run lock.",
    )


class Snapshot(BaseModel):
    model: str
    taken_at: dt.datetime
    op_errors: dict[str, float | None] = Field(description="'op@dtype' -> worst relative RMS error (None: not run).")
    op_status: dict[str, str] = Field(
        description="'op@dtype' -> the platform kernel's status: pass / fail / error / missing / skipped, or "
        "wrong_numbers when step 2 had to adapt around a kernel that gave wrong numbers."
    )
    adapted: dict[str, str] = Field(
        default={}, description="'op@dtype' -> the strategy step 2 adapted it with (no kernel, or a bad one)."
    )
    op_problems: dict[str, str] = Field(default={}, description="'op@dtype' -> why it was adapted.")
    first_divergent: str | None = Field(description="First module over tolerance in the whole-model check.")
    loss: list[float] | None = Field(None, description="Trial candidate loss curve, if step 5 ran.")
    tokens_per_s: float | None = Field(None, description="Trial candidate steady-state throughput.")
    run: str | None = Field(None, description="The store prefix of the run the snapshot was taken from.")

    @classmethod
    def from_results(
        cls, model: str, ops: OperatorsResult | None, trial: TrialResult | None, run: str | None = None
    ) -> Snapshot:
        errors: dict[str, float | None] = {}
        status: dict[str, str] = {}
        for check in ops.ops.checks if ops else []:
            name = f"{check.op}@{check.dtype}"
            errors[name] = check.metrics.rel_rmse if check.metrics else None
            status[name] = check.status
        problems, adapted = {}, {}
        for adaptation in ops.ops.adaptations if ops else []:
            name = f"{adaptation.op}@{adaptation.dtype}"
            if adaptation.strategy:
                adapted[name] = adaptation.strategy
            if adaptation.cause != "missing" and name in status:  # the platform's own kernel was wrong
                status[name], problems[name] = adaptation.cause, adaptation.problem
        return cls(
            model=model,
            taken_at=dt.datetime.now(dt.UTC),
            op_errors=errors,
            op_status=status,
            op_problems=problems,
            adapted=adapted,
            first_divergent=ops.layers.first_divergent if ops and ops.layers else None,
            loss=trial.candidate.loss if trial else None,
            tokens_per_s=trial.candidate.tokens_per_s if trial else None,
            run=run,
        )

    def wrong_kernels(self) -> list[str]:
        """Step 2's failing category: a platform kernel with wrong numbers (even when worked around),
        or a failing op nothing fixed. An op whose kernel is missing or raised and that step 2
        adapted is its warning category (`adapted`), not a wrong kernel."""
        return sorted(
            op
            for op, status in self.op_status.items()
            if status == "wrong_numbers" or (status in ("fail", "error") and op not in self.adapted)
        )


class Finding(BaseModel):
    model: str
    metric: str
    baseline: int | float | str | None
    current: int | float | str | None
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
    """Mean relative error over the common steps: the trial's alignment metric, against the baseline."""
    errors = relative_errors(base, cur)
    return sum(errors) / max(len(errors), 1)


def compare_snapshots(baseline: Snapshot, current: Snapshot, tolerance: RegressionTolerance) -> list[Finding]:
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
                    baseline=baseline.loss[-1],
                    current=current.loss[-1],
                    change=f"mean rel. distance {d:.3%} (limit {tolerance.loss_mean_rel:.1%}); "
                    f"final loss {baseline.loss[-1]:.4f} -> {current.loss[-1]:.4f}",
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
                change=f"{-drop:+.1%} ({baseline.tokens_per_s:.0f} -> {current.tokens_per_s:.0f} tokens/s, "
                f"limit -{tolerance.throughput_drop:.0%})",
                regressed=drop > tolerance.throughput_drop,
            )
        )
    return findings


def run_namespace(model: str, when: dt.datetime) -> str:
    """The store folder of one regression rerun: its own, per watched model and UTC time, so it
    never reuses, rewrites or deletes a user's run (or an earlier regression run)."""
    return f"regression/runs/{model}/{when.astimezone(dt.UTC).strftime('%Y-%m-%dT%H%M%S%fZ')}"


class PrunedRun(BaseModel):
    """A regression run `prune_runs` deleted."""

    folder: str = Field(description="Its store folder, `regression/runs/<model>/<UTC time>`.")
    url: str
    objects: int = Field(description="Objects deleted under it.")


# A run folder that holds this key is running: its run lock (`day0.runs.lock`) is taken.
_LOCK_HOLDER = "/lock/holder.json"


def prune_runs(
    store: ArtifactStore, model: str, keep: int, baselines: list[Baseline]
) -> tuple[list[PrunedRun], list[str]]:
    """Delete `model`'s regression runs older than the latest `keep` (see the module contract);
    return the runs deleted and, for each older run kept, why."""
    root = f"regression/runs/{model}/"
    runs: dict[str, list[str]] = {}
    for key in store.list(root):
        stamp, _, rest = key.removeprefix(root).partition("/")
        runs.setdefault(stamp, []).append(rest)
    # a baseline names the run it was taken from by URL (`Snapshot.run`): its folder is that run's
    protected = {b.snapshot.run for b in baselines if b.snapshot.run}
    pruned, kept = [], []
    for stamp in sorted(runs)[:-keep]:  # the UTC stamps sort as times do
        folder = root + stamp
        url = store.url(folder)
        if any(("/" + rest).endswith(_LOCK_HOLDER) for rest in runs[stamp]):
            kept.append(f"{url}: kept, it holds its run lock (running)")
        elif any(run == url or run.startswith(url + "/") for run in protected):
            kept.append(f"{url}: kept, a baseline was taken from it")
        else:
            pruned.append(PrunedRun(folder=folder, url=url, objects=store.delete_prefix(folder)))
    return pruned, kept


class Baseline(BaseModel):
    """One accepted version of a model's baseline."""

    version: int = Field(ge=1)
    accepted_at: dt.datetime
    reason: str = Field(description="'baseline created' (first snapshot) or 'baseline updated' (asked for).")
    snapshot: Snapshot


class RegressionStore:
    """`regression/baselines/<model>/v<N>.json`, `regression/history/<model>/<utc time>.json`."""

    def __init__(self, store: ArtifactStore):
        self.store = store

    def _versions(self, model: str) -> list[tuple[int, str]]:
        found = []
        for key in self.store.list(f"regression/baselines/{model}/"):
            name = key.rsplit("/", 1)[-1]
            if name.startswith("v") and name.endswith(".json") and name[1:-5].isdigit():
                found.append((int(name[1:-5]), key))
        return sorted(found)

    def _baseline(self, key: str) -> Baseline:
        try:
            return self.store.get_model(key, Baseline)
        except CorruptRecord as exc:
            raise exc.with_remedy(
                "delete it (the version before it becomes the baseline), or rerun with --update-baseline"
            ) from None

    def baselines(self, model: str) -> list[Baseline]:
        """Every accepted version, oldest first."""
        return [self._baseline(key) for _, key in self._versions(model)]

    def baseline(self, model: str) -> Baseline | None:
        """The latest accepted version, or None before the first; `CorruptRecord` naming it when corrupt."""
        versions = self._versions(model)
        return self._baseline(versions[-1][1]) if versions else None

    def accept(self, snapshot: Snapshot, reason: str) -> Baseline:
        """Write the snapshot as the next version; the earlier versions stay."""
        versions = self._versions(snapshot.model)
        baseline = Baseline(
            version=versions[-1][0] + 1 if versions else 1,
            accepted_at=dt.datetime.now(dt.UTC),
            reason=reason,
            snapshot=snapshot,
        )
        self.store.put_json(
            f"regression/baselines/{snapshot.model}/v{baseline.version:04d}.json", baseline.model_dump(mode="json")
        )
        return baseline

    def append(self, snapshot: Snapshot) -> None:
        stamp = snapshot.taken_at.strftime("%Y%m%dT%H%M%S%fZ")
        self.store.put_json(f"regression/history/{snapshot.model}/{stamp}.json", snapshot.model_dump(mode="json"))

    def history(self, model: str) -> list[Snapshot]:
        """The model's stored snapshots, oldest first; a corrupt one is left out with a warning naming it."""
        snapshots = []
        for key in self.store.list(f"regression/history/{model}/"):
            try:
                snapshots.append(self.store.get_model(key, Snapshot))
            except CorruptRecord as exc:
                logging.getLogger("day0").warning("%s; left out of the trend", exc.with_remedy("delete it"))
        return snapshots


def trend_rows(history: list[Snapshot]) -> list[TableRow]:
    """One row per stored run: the worst op error, first divergent layer, final loss, throughput."""
    rows: list[TableRow] = []
    for snap in history:
        errors = [e for e in snap.op_errors.values() if e is not None]
        worst = max(snap.op_errors, key=lambda k: snap.op_errors[k] or 0.0) if errors else None
        rows.append(
            {
                "model": snap.model,
                "taken_at": snap.taken_at.isoformat(timespec="seconds"),
                "worst_op": worst,
                "worst_op_error": max(errors) if errors else None,
                "adapted": len(snap.adapted),
                "wrong_kernels": len(snap.wrong_kernels()),
                "first_divergent": snap.first_divergent,
                "final_loss": snap.loss[-1] if snap.loss else None,
                "tokens_per_s": snap.tokens_per_s,
            }
        )
    return rows


def _plotted(cell: str | int | float | bool | None) -> float:
    """A numeric trend cell as a plotted value; an empty one (no error measured) at 0."""
    return float(cell) if isinstance(cell, int | float) else 0.0


def trend_report(model: str, history: list[Snapshot], findings: list[str], regressed: bool) -> tuple[str, bytes]:
    """The report section for one model (Markdown naming each regression, or the run's outcome, the
    trend table) and its plot."""
    from day0.plots import line_overlay

    rows = trend_rows(history)
    runs = list(range(1, len(rows) + 1))
    series = {"worst op rel. RMS error": (runs, [_plotted(r["worst_op_error"]) for r in rows])}
    series["ops adapted (no kernel)"] = (runs, [_plotted(r["adapted"]) for r in rows])
    series["platform kernels with wrong numbers"] = (runs, [_plotted(r["wrong_kernels"]) for r in rows])
    png = line_overlay(f"{model}: validation over stored runs", series, "run", "value")
    cols = [
        "taken_at",
        "worst_op",
        "worst_op_error",
        "adapted",
        "wrong_kernels",
        "first_divergent",
        "final_loss",
        "tokens_per_s",
    ]
    lines = [
        f"## Regression: {model}",
        "",
        *(f"- **regressed**: {f}" if regressed else f"- {f}" for f in findings),
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
