"""The run lock's lease across hosts (issue 44): a holder on another host is taken over only once its lease
expired, an earlier attempt of the same flow run elsewhere is waited for, not taken over while it renews,
and a holder whose record was replaced is stopped (fencing). With the real file store and the real S3 server;
a host is a holder record's `host`, or `socket.gethostname` replaced in a subprocess."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from day0.runs.context import RunContext
from day0.runs.lock import LeaseLost, RunLocked, hold_run
from day0.spec.pipeline import spec_from_dict

FLOW_RUN = "11111111-2222-3333-4444-555555555555"
LEASE_S = 1.5


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.integration)])
def ctx(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunContext]:
    monkeypatch.setenv("DAY0_RUN_LEASE_S", str(LEASE_S))
    if request.param == "file":
        storage = f"file://{tmp_path}/store"
    else:
        server = request.getfixturevalue("s3_server")
        storage = f"s3://{server.bucket}/{tmp_path.name}"
    spec = spec_from_dict(
        {"metadata": {"name": "lease"}, "model": "tiny-deepseek-v3", "platform": "cpu", "storage": storage}
    )
    yield RunContext.create(spec, flow_run_id=FLOW_RUN)


def _key(ctx: RunContext) -> str:
    return ctx.key("lock", "holder.json")


def _elsewhere(renewed_ago_s: float, flow_run_id: str | None = None) -> dict[str, object]:
    renewed = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=renewed_ago_s)).isoformat()
    return {
        "flow_run_id": flow_run_id,
        "host": "pod-elsewhere",
        "pid": 7,
        "pid_started": "1",
        "started_at": renewed,
        "renewed_at": renewed,
        "lease_s": 30,
    }


def test_a_live_lease_elsewhere_is_refused_and_an_expired_one_taken_over(ctx: RunContext) -> None:
    ctx.store.put_json(_key(ctx), _elsewhere(renewed_ago_s=5))  # pid 7 is alive or not here: only the lease counts
    with (
        pytest.raises(RunLocked, match="pid 7 on pod-elsewhere"),
        hold_run(ctx.model_copy(update={"flow_run_id": None})),
    ):
        pass
    ctx.store.put_json(_key(ctx), _elsewhere(renewed_ago_s=31))
    with hold_run(ctx.model_copy(update={"flow_run_id": None})):
        assert ctx.store.get_json(_key(ctx))["pid"] == os.getpid()
    assert not ctx.store.exists(_key(ctx)), "released on exit"


_HOLDER = """
import socket, sys
socket.gethostname = lambda: "pod-a"  # attempt 1 runs in another pod
from day0.runs.context import RunContext
from day0.runs.lock import hold_run
with hold_run(RunContext.model_validate_json(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_an_earlier_attempt_on_another_host_is_refused_while_it_renews_and_taken_over_once_its_lease_expired(
    ctx: RunContext,
) -> None:
    """Issue 44: a late crash report started attempt 2 in another pod while attempt 1 still trained, and the
    lock took over an earlier attempt elsewhere at once: both wrote one folder."""
    first = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, ctx.model_dump_json()], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert first.stdout is not None and first.stdout.readline() == "held\n"
        started = time.monotonic()
        with pytest.raises(RunLocked, match=r"on pod-a.*an earlier attempt of this flow run"), hold_run(ctx):
            pass
        # refused once it saw a renewal: within about a third of the lease, long before the lease could run out
        assert time.monotonic() - started < LEASE_S, "an attempt that renews is alive: not waited out"
        first.send_signal(signal.SIGKILL)  # its pod dies: no release, no more renewals
        first.wait(10)
        last = json.loads(ctx.store.get_bytes(_key(ctx)))
        with hold_run(ctx):  # attempt 2 waits for the lease to run out, then takes over
            taken = dt.datetime.now(dt.UTC)
            assert ctx.store.get_json(_key(ctx))["host"] != "pod-a"
        end = dt.datetime.fromisoformat(last["renewed_at"]) + dt.timedelta(seconds=last["lease_s"])
        assert end < taken < end + dt.timedelta(seconds=LEASE_S), (last, taken)
    finally:
        first.kill()
        first.wait(10)


def test_a_holder_whose_record_was_replaced_is_stopped(ctx: RunContext) -> None:
    """Fencing: a holder that finds at its next renewal that the record is no longer its own (its lease lapsed
    and another run took over) stops its run with the teardown of a cancel, and leaves the record alone."""
    stalled = threading.Event()
    started = time.monotonic()
    with pytest.raises(LeaseLost, match="taken over by pid 7 on pod-elsewhere"), hold_run(ctx):
        ctx.store.put_json(_key(ctx), _elsewhere(renewed_ago_s=0))
        stalled.wait(10)  # the run's work: interrupted by the renewal thread's SIGINT
    assert time.monotonic() - started < LEASE_S, "stopped at the next renewal (every third of the lease)"
    assert ctx.store.get_json(_key(ctx))["host"] == "pod-elsewhere", "the new holder's record is kept"
