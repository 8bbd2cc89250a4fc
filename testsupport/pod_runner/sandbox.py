"""One container as a process tree on this machine: `unshare` namespaces, bind mounts, cleanup.

Why this shape: a container here is `setpriv --pdeathsig KILL unshare --mount --uts --pid --fork
--kill-child --mount-proc sh -c SETUP CMD...`. The new PID namespace makes the command PID 1 of
its own tree, so one SIGKILL to it ends every process of the container (the kernel kills a PID
namespace with its init); `--kill-child` ties that init to `unshare`, and `--pdeathsig` ties
`unshare` to the runner's spawning thread, so a runner killed with SIGKILL leaves nothing behind.
The private mount namespace gives the container its own /tmp, /dev/shm, /etc/hosts and volume
mounts without touching the host's. Network, users and cgroups are the host's.

Every process carries `DAY0_POD_RUNNER=<runner>/<node>/<pod uid>` in its environment: `sweep`
finds (and kills) leftovers of a runner or node by it, and tests assert that none remain.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MARK", "Mount", "init_pid", "marked_processes", "sandbox_argv", "signal_tree", "sweep"]

MARK = "DAY0_POD_RUNNER"
_UNSHARE = ["unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc"]


@dataclass(frozen=True)
class Mount:
    """A bind mount inside the container: `source` on this machine at `target` inside."""

    source: Path
    target: str
    read_only: bool = False


def _setup_script(mounts: Sequence[Mount], stage: Path, hostname: str, workdir: str | None) -> str:
    """Shell run as the namespace's first process: mounts, hostname, then `exec "$@"`.

    Every source is first bound under `stage`, then onto its target, parents first: a source
    under /tmp (a test's hostPath) stays reachable after /tmp itself is replaced."""
    lines = ["set -e"]
    for i, m in enumerate(mounts):
        src, staged = shlex.quote(str(m.source)), shlex.quote(str(stage / str(i)))
        lines.append(f"mkdir -p {staged}" if m.source.is_dir() else f": > {staged}")
        lines.append(f"mount --bind {src} {staged}")
    for i, m in sorted(enumerate(mounts), key=lambda im: im[1].target.rstrip("/").count("/")):
        staged, dst = shlex.quote(str(stage / str(i))), shlex.quote(m.target)
        if m.source.is_dir():
            lines.append(f"mkdir -p {dst}")
        else:
            lines.append(f'mkdir -p "$(dirname {dst})"; [ -e {dst} ] || touch {dst}')
        lines.append(f"mount --bind {staged} {dst}")
        if m.read_only:
            lines.append(f"mount -o remount,bind,ro {dst}")
    lines.append(f"hostname {shlex.quote(hostname[:63])}")
    if workdir:
        lines.append(f"mkdir -p {shlex.quote(workdir)}; cd {shlex.quote(workdir)}")
    lines.append('exec "$@"')
    return "\n".join(lines)


def sandbox_argv(
    argv: Sequence[str], mounts: Sequence[Mount], stage: Path, hostname: str, workdir: str | None
) -> list[str]:
    """The full command line that runs `argv` as a container; `stage` is an empty directory of its own."""
    stage.mkdir(parents=True, exist_ok=True)
    script = _setup_script(mounts, stage, hostname, workdir)
    return ["setpriv", "--pdeathsig", "KILL", "--", *_UNSHARE, "--", "/bin/sh", "-c", script, "day0-pod", *argv]


def init_pid(unshare_pid: int) -> int | None:
    """The host PID of the container's PID 1 (the child `unshare` forked), if it runs."""
    try:
        children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def signal_tree(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """SIGTERM goes to the container's PID 1, as a runtime sends it; SIGKILL ends the whole namespace."""
    target = init_pid(proc.pid)
    for pid in ([target] if target else []) + ([proc.pid] if sig == signal.SIGKILL or target is None else []):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _environ(pid: int) -> Mapping[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def marked_processes(match: Callable[[str], bool]) -> list[int]:
    """PIDs whose DAY0_POD_RUNNER mark (`runner/node/pod-uid`) satisfies `match`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            mark = _environ(int(entry.name)).get(MARK)
            if mark and match(mark):
                found.append(int(entry.name))
    return found


def sweep(match: Callable[[str], bool]) -> list[int]:
    """SIGKILL every process whose mark satisfies `match`; the PIDs signalled."""
    pids = marked_processes(match)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids
