"""Nothing of a run outlives its command line, even after `kill -9` of `day0 run` or `day0 calibrate`.

    python -m cli.reaper PARENT_PID TOKEN      # started by `start_reaper()`, never by hand

Contract: `start_reaper()` marks this process's environment with a fresh `DAY0_RUN_TOKEN` and
starts a small watcher in its own session (so a signal to the command line's process group does not
reach it; it ignores SIGTERM, SIGINT and SIGHUP, and ends on its own once the command line is gone).
The run's processes are the ones that carry the token (the ephemeral Prefect server, Ray's gcs,
raylet and workers, even those that daemonise) and every descendant of the command line the watcher
has seen (Ray's `DashboardAgent` and `RuntimeEnvAgent`: the raylet starts them with its own
environment, and when the raylet dies with the command line, they re-parent to PID 1). The watcher
checks its parent's liveness every 0.2 s and lists the command line's process tree every 0.5 s;
once the command line is gone (exited, or killed with any signal), it sends SIGTERM to the run's
processes still alive (a pid counts only with the start time it was seen with) and to their
descendants, SIGKILL after a grace period to those left, and exits. Processes the run only
connected to (a Prefect server or Ray cluster started elsewhere) are never touched.

Killing the watcher too (`kill -9` of both): nothing of ours runs at that moment to stop the rest.
The watcher keeps what it has seen in a state file (`<tmp>/day0-reaper-<uid>/<token>.json`);
the next watcher on this machine (the next `day0 run` or `day0 calibrate`) stops the processes of
every state file whose command line and watcher are both gone, before it watches its own run.
Linux: it reads /proc of this user's processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

__all__ = ["TOKEN_ENV", "carriers", "reap", "start_reaper", "state_dir", "sweep_abandoned"]

TOKEN_ENV = "DAY0_RUN_TOKEN"
_POLL_S = 0.2
_SCAN_S = 0.5
_GRACE_S = 5.0

Proc = tuple[int, str]  # (pid, start time in clock ticks since boot): a pid is never reused within it


def start_reaper() -> str:
    """Mark this process tree with a new token and start its watcher; returns the token."""
    token = uuid.uuid4().hex
    os.environ[TOKEN_ENV] = token
    subprocess.Popen(
        [sys.executable, "-m", "cli.reaper", str(os.getpid()), token],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return token


def state_dir() -> Path:
    """Where watchers keep their state files (one per run, private to this user)."""
    return Path(tempfile.gettempdir()) / f"day0-reaper-{os.getuid()}"


def _stat(pid: int) -> tuple[str, int, str] | None:
    """(state, parent pid, start time) of a process, or None when it is gone."""
    try:
        fields = (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), fields[19]


def _table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every live process (zombies excluded)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None and stat[0] != "Z":
            table[int(entry.name)] = (stat[1], stat[2])
    return table


def _descendants(roots: Iterable[int], table: dict[int, tuple[int, str]]) -> set[Proc]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[Proc] = set()
    frontier = list(roots)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if (child, table[child][1]) not in found:
                found.add((child, table[child][1]))
                frontier.append(child)
    return found


def carriers(token: str) -> list[int]:
    """Live processes (not zombies) whose environment holds `TOKEN_ENV=token`, this one excepted."""
    marker = f"{TOKEN_ENV}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0") and not _zombie(entry):
                found.append(int(entry.name))
        except OSError:
            continue  # gone, or another user's
    return found


def _zombie(proc: Path) -> bool:
    return (proc / "stat").read_text().rpartition(")")[2].split()[0] == "Z"


def _members(token: str, seen: set[Proc]) -> set[Proc]:
    """The run's live processes: token carriers, those seen in its tree, and their descendants."""
    table = _table()
    live = {(pid, start) for pid, start in seen if table.get(pid, (0, None))[1] == start}
    live |= {(pid, table[pid][1]) for pid in carriers(token) if pid in table}
    live |= _descendants([pid for pid, _ in live], table)
    return {(pid, start) for pid, start in live if pid != os.getpid()}


def _signal_all(procs: Iterable[Proc], signum: int) -> None:
    for pid, _ in procs:
        try:
            os.kill(pid, signum)
        except OSError:
            continue


def reap(token: str, grace_s: float = _GRACE_S, seen: Iterable[Proc] = ()) -> int:
    """SIGTERM the run's processes (carrying `token`, or in `seen` with the same start time, and
    their descendants), SIGKILL those left after `grace_s`; returns how many were signalled."""
    known = set(seen)
    procs = _members(token, known)
    _signal_all(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _members(token, known | procs):
        time.sleep(_POLL_S)
    _signal_all(_members(token, known | procs), signal.SIGKILL)  # also any started while others stopped
    return len(procs)


def _alive(proc: Proc) -> bool:
    stat = _stat(proc[0])
    return stat is not None and stat[0] != "Z" and stat[2] == proc[1]


def _save(path: Path, state: dict) -> None:
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(state))
    partial.replace(path)  # atomic: a sweeper never reads half a file


def sweep_abandoned(grace_s: float = _GRACE_S) -> int:
    """Stop what runs left whose command line and watcher were both killed; returns how many."""
    stopped = 0
    for path in sorted(state_dir().glob("*.json")):
        try:
            state = json.loads(path.read_text())
            parent, watcher = tuple(state["parent"]), tuple(state["watcher"])
            seen = {(int(pid), str(start)) for pid, start in state["seen"]}
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written or removed
        if _alive(parent) or _alive(watcher):
            continue  # that run is alive, or its watcher is stopping it
        stopped += reap(state["token"], grace_s, seen)
        path.unlink(missing_ok=True)
    return stopped


def main(argv: list[str]) -> int:
    parent, token = int(argv[0]), argv[1]
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # stop only when the command line is gone
    here = state_dir()
    here.mkdir(mode=0o700, exist_ok=True)
    path = here / f"{token}.json"
    started, mine = _stat(parent), _stat(os.getpid())
    if started is None or mine is None or os.getppid() != parent:
        reap(token)  # the command line is gone already
        return 0
    state = {"token": token, "parent": [parent, started[2]], "watcher": [os.getpid(), mine[2]]}
    seen: set[Proc] = set()
    _save(path, {**state, "seen": []})
    sweep_abandoned()
    next_scan = 0.0
    while os.getppid() == parent:
        if time.monotonic() >= next_scan:
            table = _table()
            now = {p for p in _descendants([parent], table) if p[0] != os.getpid()}
            if not now <= seen:  # forget the dead: a long run's tree churns
                seen = now | {p for p in seen if table.get(p[0], (0, None))[1] == p[1]}
                _save(path, {**state, "seen": sorted(seen)})
            next_scan = time.monotonic() + _SCAN_S
        time.sleep(_POLL_S)
    reap(token, seen=seen)
    path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
