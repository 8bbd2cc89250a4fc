"""The run manifest under concurrency: per-record objects, so racing writers lose nothing and
attempts never mix (issue 17: 302 of 400 records survived the old read-modify-write)."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from day0.runs.context import RunContext, StepRecord
from day0.spec.pipeline import spec_from_dict


def _ctx(tmp_path: Path) -> RunContext:
    spec = spec_from_dict(
        {
            "metadata": {"name": "race"},
            "model": "tiny-deepseek-v3",
            "platform": "cpu",
            "storage": f"file://{tmp_path}/store",
        }
    )
    return RunContext.create(spec)


def _record(step: str) -> StepRecord:
    return StepRecord(step=step, status="executed", started_at=dt.datetime.now(dt.UTC), seconds=0.0)


def test_400_concurrent_records_are_all_kept(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    ctx.begin_attempt()
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(lambda i: ctx.record(_record(f"s{i}")), range(400)))
    manifest = ctx.load_manifest()
    assert len(manifest.attempts) == 1
    assert sorted(r.step for r in manifest.last()) == sorted(f"s{i}" for i in range(400))


def test_two_concurrent_attempts_do_not_mix(tmp_path: Path) -> None:
    first, second = _ctx(tmp_path), _ctx(tmp_path)
    assert first.run_id == second.run_id, "the same spec: the same run folder"
    first.begin_attempt()
    second.begin_attempt()

    def write(i: int) -> None:
        (first if i % 2 else second).record(_record(f"{'a' if i % 2 else 'b'}{i}"))

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(write, range(200)))
    assert {r.step[0] for r in first.attempt_records()} == {"a"} and len(first.attempt_records()) == 100
    assert {r.step[0] for r in second.attempt_records()} == {"b"} and len(second.attempt_records()) == 100
    manifest = first.load_manifest()
    assert [len(a) for a in manifest.attempts] == [100, 100]
    assert manifest.executed(0) == [r.step for r in first.attempt_records()], "attempts in start order"
    first.publish_manifest()
    view = json.loads(next((tmp_path / "store").rglob("manifest.json")).read_text())
    assert [len(a) for a in view["attempts"]] == [100, 100]


def test_records_keep_their_order_within_an_attempt(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    for step in ("analyze", "operators", "parallel", "optimize"):
        ctx.record(_record(step))
    assert ctx.load_manifest().executed() == ["analyze", "operators", "parallel", "optimize"]
    assert ctx.attempt_records() == ctx.load_manifest().last()


def test_a_second_holder_of_a_run_is_refused_and_a_dead_one_taken_over(tmp_path: Path) -> None:
    from day0.runs.lock import RunLocked, hold_run

    ctx, other = _ctx(tmp_path), _ctx(tmp_path)
    with hold_run(ctx):
        try:
            with hold_run(other):
                raise AssertionError("two holders of one run")
        except RunLocked as exc:
            assert "already running" in str(exc) and f"pid {os.getpid()}" in str(exc) and exc.exit_code == 1
    lock = tmp_path / "store" / ctx.prefix / "lock" / "holder.json"
    assert not lock.exists(), "released on exit"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout), "pid_started": "1"}))
    with hold_run(other):  # its holder is gone (kill -9): taken over
        assert json.loads(lock.read_text())["pid"] == os.getpid()


def test_a_namespace_gives_a_run_its_own_folder_and_identity(tmp_path: Path) -> None:
    """Users' runs stay at runs/<name>/<id>; a regression run of the same spec shares neither the
    folder nor the run id (which names its RayClusters and is what a sweep deletes by)."""
    import pytest
    from pydantic import ValidationError

    users = _ctx(tmp_path)
    assert users.prefix == f"runs/race/{users.run_id}"
    regression = RunContext.create(users.spec, namespace="regression/runs/race/2026-12-02T020000Z")
    assert regression.prefix == f"regression/runs/race/2026-12-02T020000Z/race/{regression.run_id}"
    assert regression.run_id != users.run_id
    for bad in ("../runs", "runs/../x", "/abs", "runs/.hidden", ""):
        with pytest.raises(ValidationError):
            RunContext.create(users.spec, namespace=bad)


def test_an_earlier_attempt_of_the_flow_run_still_alive_keeps_the_lock(tmp_path: Path) -> None:
    """Issue 44: a late report of a crash already rescheduled started a second attempt of one flow run while
    the first, alive, trained in the same folder: the lock took over any holder of the same flow run."""
    from day0.runs.lock import RunLocked, hold_run

    first = _ctx(tmp_path).model_copy(update={"flow_run_id": "11111111-2222-3333-4444-555555555555"})
    holder = subprocess.Popen(  # attempt 1, alive in its own process
        [
            sys.executable,
            "-c",
            "import sys; from day0.runs.context import RunContext; from day0.runs.lock import hold_run\n"
            "ctx = RunContext.model_validate_json(sys.argv[1])\n"
            "with hold_run(ctx):\n    print('held', flush=True); sys.stdin.read()",
            first.model_dump_json(),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        second = RunContext.model_validate_json(first.model_dump_json())  # attempt 2: the same run, another process
        try:
            with hold_run(second):
                raise AssertionError("two attempts of one flow run hold its lock at once")
        except RunLocked as exc:
            assert f"pid {holder.pid}" in str(exc) and "an earlier attempt of this flow run" in str(exc), exc
    finally:
        holder.communicate("")
    with hold_run(second):  # attempt 1 is over: attempt 2 runs
        pass
