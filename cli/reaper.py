"""Nothing of a run outlives its command line, even after `kill -9` of `day0 run`.

    python -m cli.reaper PARENT_PID TOKEN      # started by `start_reaper()`, never by hand

Contract: `start_reaper()` marks this process's environment with a fresh `DAY0_RUN_TOKEN`, so
every process the run starts inherits it (the ephemeral Prefect server, Ray's gcs/raylet/workers,
even those that daemonise), and starts a small watcher in its own session. The watcher checks
its parent's liveness every 0.2 s; once the command line is gone (exited, or killed with any
signal), it sends SIGTERM to every process still carrying the token, SIGKILL after a grace period
to those left, and exits. Processes without the token (a Prefect server or Ray cluster the run
only connected to) are never touched. Linux: it reads /proc/<pid>/environ of this user's processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

__all__ = ["TOKEN_ENV", "carriers", "reap", "start_reaper"]

TOKEN_ENV = "DAY0_RUN_TOKEN"
_POLL_S = 0.2
_GRACE_S = 5.0


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


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except OSError:
            continue


def reap(token: str, grace_s: float = _GRACE_S) -> int:
    """SIGTERM every process carrying `token`, SIGKILL those left after `grace_s`; returns how many."""
    pids = carriers(token)
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and carriers(token):
        time.sleep(_POLL_S)
    _signal_all(carriers(token), signal.SIGKILL)  # also any started while the first ones stopped
    return len(pids)


def main(argv: list[str]) -> int:
    parent, token = int(argv[0]), argv[1]
    while os.getppid() == parent:
        time.sleep(_POLL_S)
    reap(token)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
