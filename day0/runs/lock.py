"""One running run per run folder, from every entry point (`day0 run`, a deployment run, the regression's
runs): a second run of the same spec refuses with a clear message.

Contract: `hold_run(ctx)` creates `<run prefix>/lock/holder.json` with the store's atomic
create-if-absent (file: a hard link; S3: a conditional PUT) and deletes it on exit. When the lock
is held, `RunLocked` (exit 1: a conflict while running, not bad input) names the holder. A holder
on this host that is no longer alive (its pid gone, or reused: the start time differs, after
`kill -9`) is taken over; a holder on another host is honoured, and the message says which object
to delete if it is stale. A holder record that is corrupt (not JSON) is moved aside to the run's
`corrupt/` folder with a note, and the lock taken. A holder that is an earlier attempt of the same
Prefect flow run (rescheduled after it crashed) is taken over when it is gone: on this host when its
process is, on another host at once (its crash is all that can be known of it there). An earlier
attempt still alive on this host is refused like any holder: a late report of a crash that was
already rescheduled (issue 44) started a second attempt of one flow run while the first still trained
in the same folder, and two attempts of one flow run never run at once. With
`reuse_held=True`, a lock this process already holds is used as it is (the flow inside `day0 run`,
which took it before starting Prefect). Runs of different specs, even in one store, never contend.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from day0.errors import CorruptRecord, Day0Error
from day0.runs.context import RunContext

__all__ = ["RunLocked", "hold_run"]


class RunLocked(Day0Error):
    exit_code = 1


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or None when it is gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


# The run prefixes this process holds the lock of (`reuse_held`).
_HELD: set[str] = set()


def _holder(flow_run_id: str | None) -> dict[str, object]:
    return {
        "flow_run_id": flow_run_id,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_started": _start_time(os.getpid()),
        "started_at": dt.datetime.now(dt.UTC).isoformat(),
    }


def _dead_here(holder: dict[str, object]) -> bool:
    if holder.get("host") != socket.gethostname() or not Path("/proc").is_dir():
        return False
    pid = holder.get("pid")
    return not isinstance(pid, int) or _start_time(pid) != holder.get("pid_started")


def _holder_of(ctx: RunContext, key: str) -> dict[str, object] | None:
    """The lock's holder record, {} when it vanished meanwhile, None when it was corrupt: then it is
    moved aside to the run's `corrupt/` folder with a note (no run can be shown to hold the lock)."""
    store = ctx.store
    if not store.exists(key):
        return {}
    try:
        holder = store.get_json(key)
    except CorruptRecord as exc:
        why = exc.why
    else:
        if isinstance(holder, dict):
            return holder
        why = f"not a mapping but {type(holder).__name__}"
    aside = store.move_aside(key, ctx.key("corrupt", f"lock-holder-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S%fZ}.json"))
    logging.getLogger("day0").warning("the run lock %s was corrupt (%s): moved aside to %s", store.url(key), why, aside)
    return None


@contextmanager
def hold_run(ctx: RunContext, reuse_held: bool = False) -> Iterator[None]:
    """Hold the run folder's lock for the duration of the block (see the module contract)."""
    if reuse_held and ctx.prefix in _HELD:
        yield
        return
    store, folder = ctx.store, ctx.key("lock")
    key, mine = f"{folder}/holder.json", json.dumps(_holder(ctx.flow_run_id)).encode()
    if not store.create(key, mine):
        holder = _holder_of(ctx, key)
        earlier_attempt_elsewhere = (
            holder is not None
            and ctx.flow_run_id is not None
            and holder.get("flow_run_id") == ctx.flow_run_id
            and holder.get("host") != socket.gethostname()
        )
        if holder is not None and not earlier_attempt_elsewhere and not _dead_here(holder):
            attempt = ": an earlier attempt of this flow run" if holder.get("flow_run_id") == ctx.flow_run_id else ""
            raise RunLocked(
                f"run {ctx.prefix} of {ctx.spec.metadata.name!r} is already running (pid {holder.get('pid')} on "
                f"{holder.get('host')}, since {holder.get('started_at')}{attempt}); wait for it to finish, or "
                f"delete {store.url(key)} if that run is gone"
            )
        store.delete_prefix(folder)  # its holder died without releasing it
        if not store.create(key, mine):
            raise RunLocked(f"run {ctx.prefix}: another run took the lock at the same moment; try again")
    _HELD.add(ctx.prefix)
    try:
        yield
    finally:
        _HELD.discard(ctx.prefix)
        if store.exists(key) and store.get_bytes(key) == mine:
            store.delete_prefix(folder)
