"""Retention of regression runs: the latest N of a model's runs stay, older ones are deleted through the
store (file and S3 alike), except a run that holds its run lock or that a baseline was taken from; the
other models' runs and the baselines themselves are untouched."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from day0.regression import RegressionRetention, RegressionStore, Snapshot, prune_runs, run_namespace
from day0.store import ArtifactStore, open_store
from flows.regression import RegressionWatch

T0 = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.UTC)


def _runs(store: ArtifactStore, model: str, nights: int) -> list[str]:
    """`nights` regression runs of `model`, one a night, each with a result and a trial checkpoint."""
    folders = []
    for night in range(nights):
        folder = run_namespace(model, T0 + dt.timedelta(days=night))
        run = f"{folder}/{model}-spec/0123456789ab"
        store.put_json(f"{run}/operators/result.json", {"night": night})
        store.put_bytes(f"{run}/trial/checkpoints/candidate/step_000005/model.pt", b"x" * 64)
        folders.append(folder)
    return folders


def _baseline_from(store: ArtifactStore, model: str, folder: str) -> RegressionStore:
    history = RegressionStore(store)
    snap = Snapshot(
        model=model,
        taken_at=T0,
        op_errors={},
        op_status={},
        first_divergent=None,
        run=store.url(f"{folder}/{model}-spec/0123456789ab"),
    )
    history.accept(snap, "baseline created")
    return history


def _check_retention(store: ArtifactStore) -> None:
    folders = _runs(store, "m", 6)
    other = _runs(store, "m2", 3)
    history = _baseline_from(store, "m", folders[0])
    store.put_json(f"{folders[1]}/m-spec/0123456789ab/lock/holder.json", {"pid": 1, "host": "elsewhere"})

    pruned, kept = prune_runs(store, "m", 2, history.baselines("m"))

    assert [p.folder for p in pruned] == folders[2:4]
    assert all(p.objects == 2 for p in pruned)
    assert [k.split(": ", 1)[1] for k in kept] == [
        "kept, a baseline was taken from it",
        "kept, it holds its run lock (running)",
    ]
    left = {key.split("/")[3] for key in store.list("regression/runs/m/")}
    assert left == {f.rsplit("/", 1)[1] for f in [folders[0], folders[1], *folders[4:]]}
    assert len(store.list("regression/runs/m2/")) == 2 * len(other)  # another model's runs are its own
    assert history.baseline("m") is not None
    assert prune_runs(store, "m", 2, history.baselines("m"))[0] == []  # nothing left beyond the last 2


def test_file_store_keeps_the_latest_runs_a_baseline_and_a_running_one(tmp_path) -> None:
    _check_retention(open_store(f"file://{tmp_path}"))


def test_s3_store_keeps_the_latest_runs_a_baseline_and_a_running_one(s3_server) -> None:
    _check_retention(open_store(f"s3://{s3_server.bucket}/retention"))


def test_fewer_runs_than_kept_deletes_nothing(tmp_path) -> None:
    store = open_store(f"file://{tmp_path}")
    _runs(store, "m", 3)
    assert prune_runs(store, "m", 3, []) == ([], [])
    assert len(store.list("regression/runs/m/")) == 6


def test_watch_file_sets_the_runs_kept() -> None:
    base = {"models": [{"name": "m", "spec": "m.yaml"}]}
    assert RegressionWatch.model_validate(base).retention == RegressionRetention()
    assert RegressionWatch.model_validate(base | {"retention": {"keep_runs": 3}}).retention.keep_runs == 3
    with pytest.raises(ValidationError, match="keep_runs"):
        RegressionWatch.model_validate(base | {"retention": {"keep_runs": 0}})
