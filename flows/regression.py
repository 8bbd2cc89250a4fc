"""The regression flow: rerun the validation layers of each watched model on the current stack and
compare them with the baselines in the artifact store.

    python -m flows.regression configs/regression/watch.yaml [--update-baseline]
    prefect deployment run regression/nightly                  # prefect.yaml, nightly on a cron

Contract: each model's spec runs as an `adapt` subflow for the steps its entry lists (numerical:
step 2's op errors and first divergent layer; convergence: step 5's loss curve and throughput), in
a store folder of its own (`regression/runs/<model>/<UTC time>/`): it computes everything anew
and never reuses, rewrites or deletes a user's run. A model's first snapshot becomes its baseline
(v1, "baseline created", a pass); later ones are compared with the latest version, and a new
version is written only with `update_baseline=True`, keeping the earlier ones. One model's failure
(a regression, a step that raised) does not stop the others; the flow run fails at the end naming
every regression with its numbers. A trend table over the stored history is published as a Prefect
table artifact and returned, and per model as a report section with a plot
(`regression/report/<model>.md`, `.png` in the store; a Markdown artifact). Each model keeps its last
`retention.keep_runs` regression runs; older ones are deleted (`day0.regression.prune_runs`), each logged.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Literal, TypeVar, cast

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run
from prefect.states import Cancelled
from pydantic import BaseModel, ConfigDict, Field

from day0.core.result import TableRow
from day0.errors import CorruptRecord, RunFailed
from day0.regression import (
    RegressionRetention,
    RegressionStore,
    RegressionTolerance,
    Snapshot,
    compare_snapshots,
    prune_runs,
    run_namespace,
    trend_report,
    trend_rows,
)
from day0.runs.context import RunSummary
from day0.spec.location import read_spec_document
from day0.spec.pipeline import spec_from_dict
from day0.steps.operators.result import OperatorsResult
from day0.steps.trial.result import TrialResult
from day0.store import open_store
from flows.adapt import adapt
from flows.recovery import cancel_requested_earlier, check_attempt

__all__ = ["RegressionFailed", "RegressionOutcome", "RegressionWatch", "regression"]


class WatchedModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", description="Baseline name in the store.")
    spec: Path = Field(description="Pipeline spec YAML (relative to the watch file).")
    steps: list[Literal["analyze", "operators", "trial"]] = Field(["analyze", "operators"])


class RegressionWatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    storage: str = Field("file://.day0", pattern=r"^(file|s3)://.+")
    models: list[WatchedModel]
    tolerance: RegressionTolerance = Field(default_factory=RegressionTolerance)
    retention: RegressionRetention = Field(default_factory=RegressionRetention)


R = TypeVar("R", OperatorsResult, TrialResult)


class RegressionFailed(RunFailed):
    """A failed regression verdict: logged as one line, like a failed step (`tasks._step.OncePerError`)."""

    def __init__(self, message: str, summary: dict[str, object] | None = None):
        super().__init__(message, summary or {})


def _load_watch(path: Path) -> RegressionWatch:
    watch = read_spec_document(path, "watch", RegressionWatch.model_validate, check="python -m flows.regression")
    for m in watch.models:  # each checked as it is read (`_rerun`): one bad entry does not stop the others
        m.spec = path.parent / m.spec
    return watch


def _rerun(model: WatchedModel, namespace: str) -> tuple[Snapshot, RunSummary]:
    """Run the model's validation steps in `namespace`; read step 2's and step 5's results from its store."""
    # validated as it is read: adapt's own errors of an inline spec would quote the file
    spec, raw = read_spec_document(
        model.spec, f"{model.name}: spec", lambda raw: (spec_from_dict(raw, str(model.spec)), raw)
    )
    try:
        summary = RunSummary.model_validate(adapt(spec=raw, only=[str(s) for s in model.steps], namespace=namespace))
    except RunFailed as exc:  # a failed verdict still leaves its results: compare them
        summary = RunSummary.model_validate(exc.summary)
    store = open_store(spec.storage)

    def read(step: str, kind: type[R]) -> R | None:
        if step not in model.steps:
            return None
        key = f"{summary.prefix}/{step}/result.json"
        if not store.exists(key):  # the step raised: nothing to compare, and never a baseline
            raise RegressionFailed(f"{step} left no result: {'; '.join(summary.failed.get(step, ['not run']))}")
        return store.get_model(key, kind)

    ops, trial = read("operators", OperatorsResult), read("trial", TrialResult)
    return Snapshot.from_results(model.name, ops, trial, run=store.url(summary.prefix)), summary


class RegressionOutcome(BaseModel):
    """What a regression run found: per model its outcome lines, and the trend table's rows."""

    models: dict[str, list[str]]
    trend: list[TableRow]  # one row per run and model, as the table artifact takes it


@flow(name="regression", log_prints=True)
def regression(watch: str = "configs/regression/watch.yaml", update_baseline: bool = False) -> RegressionOutcome:
    """Compare every watched model with its baseline: each model's outcome lines and the trend rows."""
    if cancel_requested_earlier(flow_run.get_id()):  # a cancel is final, even if a crash got the run rescheduled
        message = "the flow run's cancellation was requested earlier: not run again"
        return cast(RegressionOutcome, Cancelled(message=message))
    check_attempt(flow_run.get_run_count())  # a crashed run is rescheduled (flows/recovery.py), within bounds
    log, config = get_run_logger(), _load_watch(Path(watch))
    history = RegressionStore(open_store(config.storage))
    outcome: dict[str, list[str]] = {}
    failures: list[str] = []
    regressed_models: set[str] = set()
    for model in config.models:
        try:
            snapshot, summary = _rerun(model, run_namespace(model.name, dt.datetime.now(dt.UTC)))
        except Exception as exc:  # noqa: BLE001 - one model's failure must not stop the others
            failures.append(f"{model.name}: rerun failed: {type(exc).__name__}: {' '.join(str(exc).split())}")
            continue
        history.append(snapshot)
        try:
            baseline = history.baseline(model.name)
        except CorruptRecord as exc:  # named with its way out; the other models go on
            failures.append(f"{model.name}: {exc}")
            continue
        if baseline is None or update_baseline:
            if summary.failed:  # a baseline is what a good run looks like
                failures.append(f"{model.name}: no baseline recorded: {summary.failure_message()}")
                continue
            accepted = history.accept(snapshot, "baseline created" if baseline is None else "baseline updated")
            kept = f"; v{baseline.version} kept" if baseline else ""
            outcome[model.name] = [f"{accepted.reason}: v{accepted.version} from {snapshot.run}{kept}"]
            log.info("%s: %s", model.name, outcome[model.name][0])
        else:
            findings = compare_snapshots(baseline.snapshot, snapshot, config.tolerance)
            regressed = [str(f) for f in findings if f.regressed]
            outcome[model.name] = regressed or [f"no regression against baseline v{baseline.version}"]
            failures += [f"regressed: {f}" for f in regressed]
            regressed_models |= {model.name} if regressed else set()
            log.info(
                "%s: %d quantities compared with baseline v%d, %d regressed (run %s)",
                model.name,
                len(findings),
                baseline.version,
                len(regressed),
                snapshot.run,
            )
    for model in config.models:
        _prune(history, model.name, config.retention.keep_runs)
    rows = [row for m in config.models for row in trend_rows(history.history(m.name))]
    for model in config.models:
        lines = outcome.get(model.name) or [f for f in failures if f.startswith(f"{model.name}: ")]
        markdown, png = trend_report(model.name, history.history(model.name), lines, model.name in regressed_models)
        history.store.put_bytes(f"regression/report/{model.name}.png", png, "image/png")
        history.store.put_text(f"regression/report/{model.name}.md", markdown, "text/markdown")
        create_markdown_artifact(key=f"regression-{model.name}", markdown=markdown)
    create_table_artifact(key="regression-trend", table=rows, description="Validation layers per run, per model")
    if failures:
        raise RegressionFailed(f"{len(failures)} regression finding(s): " + " | ".join(failures))
    return RegressionOutcome(models=outcome, trend=rows)


def _prune(history: RegressionStore, model: str, keep: int) -> None:
    """Delete the model's regression runs beyond the latest `keep`, logging each; with a corrupt baseline
    nothing is deleted (the run it names cannot be told apart)."""
    log = get_run_logger()
    try:
        baselines = history.baselines(model)
    except CorruptRecord as exc:
        log.warning("%s: no regression run pruned: %s", model, exc)
        return
    pruned, kept = prune_runs(history.store, model, keep, baselines)
    for run in pruned:
        log.info("%s: pruned regression run %s (%d objects; keeping the latest %d)", model, run.url, run.objects, keep)
    for why in kept:
        log.info("%s: %s", model, why)


def _main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--update-baseline"]
    try:
        result = regression(
            watch=args[0] if args else "configs/regression/watch.yaml", update_baseline="--update-baseline" in argv
        )
    except RegressionFailed as exc:
        print(f"FAIL {exc}", file=sys.stderr)
        return 1
    for model, lines in result.models.items():
        print(f"PASS {model}: {'; '.join(lines)}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
