"""One running run per run folder, from every entry point (`day0 run`, a deployment run, the regression's
runs): a second run of the same spec refuses with a clear message.

Contract: `hold_run(ctx)` creates `<run prefix>/lock/holder.json` with the store's atomic
create-if-absent (file: a hard link; S3: a conditional PUT) and deletes it on exit. When the lock
is held, `RunLocked` (exit 1: a conflict while running, not bad input) names the holder.

The lock is a lease: the holder record carries `renewed_at` and `lease_s` (`DAY0_RUN_LEASE_S`), and a
thread of the holder renews it every `lease_s/3` with the store's compare-and-swap (`ArtifactStore.swap`:
file: a flock'd compare and rename; S3: a PUT conditional on the ETag read). A holder on this host that
is no longer alive (its pid gone, or reused: the start time differs, after `kill -9`) is taken over at
once; a holder on another host only once its lease expired (its host's death is all that can be known
of it there). Every takeover is a swap of the record read, so of two takers one wins. An earlier attempt
of the same Prefect flow run on another host (a rerun after its pod crashed) is waited for up to one
lease, then taken over once expired; one that still renews is alive and refused like any holder: a late
report of a crash that was already rescheduled (issue 44) started a second attempt of one flow run while
the first still trained in the same folder, and two attempts of one flow run never run at once.

Fencing: a renewal that finds the record no longer its own (its lease lapsed, say the store was away,
and another run took over) stops the run: SIGINT to the main thread, the teardown of a cancel, and
`LeaseLost` from the block instead of the KeyboardInterrupt. A holder record that is corrupt (not JSON)
is moved aside to the run's `corrupt/` folder with a note, and the lock taken. With `reuse_held=True`,
a lock this process already holds is used as it is (the flow inside `day0 run`, which took it before
starting Prefect). Runs of different specs, even in one store, never contend.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from day0.errors import Day0Error, shorten
from day0.runs.context import RunContext
from day0.settings import RunSettings

__all__ = ["LeaseLost", "RunLocked", "hold_run"]


class RunLocked(Day0Error):
    exit_code = 1


class LeaseLost(RunLocked):
    """The run's lock was taken over while it ran (its lease lapsed): the run was stopped."""


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or None when it is gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


# The run prefixes this process holds the lock of (`reuse_held`).
_HELD: set[str] = set()


def _holder(flow_run_id: str | None, lease_s: float) -> dict[str, object]:
    now = dt.datetime.now(dt.UTC).isoformat()
    return {
        "flow_run_id": flow_run_id,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_started": _start_time(os.getpid()),
        "started_at": now,
        "renewed_at": now,
        "lease_s": lease_s,
    }


def _lease_end(holder: dict[str, object]) -> dt.datetime | None:
    """When the holder's lease runs out; None for a record without one (written by hand, or by a day0
    from before leases), which never expires: its holder is judged by its pid alone."""
    try:
        renewed = dt.datetime.fromisoformat(str(holder["renewed_at"]))
        lease = dt.timedelta(seconds=float(str(holder["lease_s"])))
    except (KeyError, ValueError, OverflowError):
        return None
    return renewed + lease if renewed.tzinfo is not None else None


def _expired(holder: dict[str, object]) -> bool:
    """Whether the holder's lease ran out, by this host's clock."""
    end = _lease_end(holder)
    return end is not None and dt.datetime.now(dt.UTC) > end


def _dead_here(holder: dict[str, object]) -> bool:
    if holder.get("host") != socket.gethostname() or not Path("/proc").is_dir():
        return False
    pid = holder.get("pid")
    return not isinstance(pid, int) or _start_time(pid) != holder.get("pid_started")


def _holder_of(ctx: RunContext, key: str) -> tuple[bytes, dict[str, object]] | None:
    """The lock's holder record as read (the bytes a takeover swaps) and parsed; None when it vanished
    meanwhile or was corrupt: then it is moved aside to the run's `corrupt/` folder with a note (no run
    can be shown to hold the lock)."""
    store = ctx.store
    if not store.exists(key):
        return None
    raw = store.get_bytes(key)
    try:
        holder = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        why = f"not JSON: {shorten(str(exc), 80)}"
    else:
        if isinstance(holder, dict):
            return raw, holder
        why = f"not a mapping but {type(holder).__name__}"
    aside = store.move_aside(key, ctx.key("corrupt", f"lock-holder-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S%fZ}.json"))
    logging.getLogger("day0").warning("the run lock %s was corrupt (%s): moved aside to %s", store.url(key), why, aside)
    return None


def _who(holder: dict[str, object]) -> str:
    return f"pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('started_at')}"


# Races (the record vanished or changed between reads) retried before giving up.
_RACES = 10


def _take(ctx: RunContext, key: str, mine: bytes, poll_s: float) -> None:
    """Create the holder record, or take it over from a holder that is gone (see the module contract)."""
    store, races, waited_on = ctx.store, 0, None
    while not store.create(key, mine):
        seen = _holder_of(ctx, key)
        if seen is not None:
            raw, holder = seen
            here = holder.get("host") == socket.gethostname()
            if not (_dead_here(holder) if here else _expired(holder)):
                earlier = ctx.flow_run_id is not None and holder.get("flow_run_id") == ctx.flow_run_id
                if earlier and not here and waited_on in (None, raw) and _lease_end(holder) is not None:
                    # a rerun after its pod crashed: that attempt's lease runs out within lease_s, unless it
                    # renews it (then it is alive: refused below)
                    waited_on = raw
                    time.sleep(poll_s)
                    continue
                attempt = ": an earlier attempt of this flow run" if earlier else ""
                raise RunLocked(
                    f"run {ctx.prefix} of {ctx.spec.metadata.name!r} is already running ({_who(holder)}{attempt}); "
                    f"wait for it to finish, or delete {store.url(key)} if that run is gone"
                )
            if store.swap(key, raw, mine):  # its holder died without releasing it
                return
        races += 1
        if races > _RACES:
            raise RunLocked(f"run {ctx.prefix}: another run took the lock at the same moment; try again")


@contextmanager
def hold_run(ctx: RunContext, reuse_held: bool = False) -> Iterator[None]:
    """Hold the run folder's lock for the duration of the block, renewing its lease (see the module contract)."""
    if reuse_held and ctx.prefix in _HELD:
        yield
        return
    store, key, lease_s = ctx.store, ctx.key("lock", "holder.json"), RunSettings().lease_s
    record = _holder(ctx.flow_run_id, lease_s)
    held = json.dumps(record).encode()
    _take(ctx, key, held, poll_s=min(1.0, lease_s / 6))
    done, lost = threading.Event(), threading.Event()
    main = threading.main_thread().ident if threading.current_thread() is threading.main_thread() else None
    why: list[str] = []

    def renew() -> None:
        nonlocal held
        while not done.wait(lease_s / 3):
            renewed = json.dumps({**record, "renewed_at": dt.datetime.now(dt.UTC).isoformat()}).encode()
            try:
                kept = store.swap(key, held, renewed)
            except Day0Error:  # the store briefly away: tried again (past the lease, another run may take over)
                continue
            if kept:
                held = renewed
                continue
            seen = _holder_of(ctx, key) if not done.is_set() else None
            why.append(f"taken over by {_who(seen[1])}" if seen is not None else "released by another process")
            lost.set()
            logging.getLogger("day0").error("run %s: its lock was %s: stopping", ctx.prefix, why[0])
            if main is not None and not done.is_set():
                signal.pthread_kill(main, signal.SIGINT)  # the teardown of a cancel: Ray job stopped, report written
            return

    renewer = threading.Thread(target=renew, name="day0-lease-renewal", daemon=True)
    _HELD.add(ctx.prefix)
    renewer.start()
    try:
        yield
    except KeyboardInterrupt:
        if not lost.is_set():
            raise
    finally:
        done.set()
        renewer.join()
        _HELD.discard(ctx.prefix)
        if not lost.is_set():
            store.swap(key, held, None)
    if lost.is_set():
        raise LeaseLost(
            f"run {ctx.prefix} of {ctx.spec.metadata.name!r} was stopped: its lock was {why[0]} (its lease of "
            f"{lease_s:g} s lapsed unrenewed: the store was away or this process stalled)"
        )
