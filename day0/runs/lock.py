"""One running `day0 run` per run folder: a second run of the same spec refuses with a clear message.

Contract: `hold_run(ctx)` creates `<run prefix>/lock/holder.json` with the store's atomic
create-if-absent (file: a hard link; S3: a conditional PUT) and deletes it on exit. When the lock
is held, `RunLocked` (exit 1: a conflict while running, not bad input) names the holder. A holder
on this host that is no longer alive (its pid gone, or reused: the start time differs, after
`kill -9`) is taken over; a holder on another host is honoured, and the message says which object
to delete if it is stale. Runs of different specs, even in one store, never contend.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from day0.errors import Day0Error
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


def _holder() -> dict[str, object]:
    return {
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


@contextmanager
def hold_run(ctx: RunContext) -> Iterator[None]:
    """Hold the run folder's lock for the duration of the block (see the module contract)."""
    store, folder = ctx.store, ctx.key("lock")
    key, mine = f"{folder}/holder.json", json.dumps(_holder()).encode()
    if not store.create(key, mine):
        holder = store.get_json(key) if store.exists(key) else {}
        if not _dead_here(holder):
            raise RunLocked(
                f"run {ctx.prefix} of {ctx.spec.metadata.name!r} is already running (pid {holder.get('pid')} on "
                f"{holder.get('host')}, since {holder.get('started_at')}); wait for it to finish, or delete "
                f"{store.url(key)} if that run is gone"
            )
        store.delete_prefix(folder)  # its holder died without releasing it
        if not store.create(key, mine):
            raise RunLocked(f"run {ctx.prefix}: another run took the lock at the same moment; try again")
    try:
        yield
    finally:
        if store.exists(key) and store.get_bytes(key) == mine:
            store.delete_prefix(folder)
