"""Nothing outlives a runner: every started runner is stopped at exit and on SIGTERM/SIGHUP, and a
new one first sweeps what dead runners left (processes, pods, Nodes, files).

A runner's id is `r<pid>-<hex>`, so whether its runner still runs on this machine is whether that
PID does; leftovers of a live runner are never taken over.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException

from testsupport.pod_runner.node_api import wait_gone
from testsupport.pod_runner.nodes import RUNNER_LABEL
from testsupport.pod_runner.sandbox import sweep

__all__ = ["LIVE", "install_signal_handlers", "runner_alive", "sweep_dead_roots", "sweep_stale"]


class Stoppable(Protocol):
    def stop(self) -> None: ...


LIVE: set[Stoppable] = set()  # started, not yet stopped: stopped at exit and on SIGTERM/SIGHUP


def _stop_all() -> None:
    for runner in list(LIVE):
        runner.stop()


def install_signal_handlers() -> None:
    """Once, from the main thread, where the signal's action is still the default: stop every
    runner, then die of the signal as before."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_DFL:
            continue

        def handler(signum: int, frame: FrameType | None) -> None:
            _stop_all()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        signal.signal(sig, handler)


atexit.register(_stop_all)


def runner_alive(runner_id: str) -> bool:
    """Whether the runner of this id (`r<pid>-<hex>`) still runs on this machine."""
    pid = runner_id[1:].split("-")[0] if runner_id.startswith("r") else ""
    return pid.isdigit() and int(pid) != 0 and Path(f"/proc/{pid}").exists()


def sweep_stale(core: Any, names: Iterable[str]) -> None:
    """Leftovers of a dead runner with these node names: processes, pods, Nodes. A Node of a
    live runner on this machine is refused (RuntimeError naming it), never taken over."""
    wanted = set(names)

    def stale(mark: str) -> bool:
        parts = mark.split("/")
        return len(parts) == 3 and parts[1] in wanted and not runner_alive(parts[0])

    sweep(stale)
    for name in sorted(wanted):
        try:
            node = core.read_node(name)
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        owner = (node.metadata.labels or {}).get(RUNNER_LABEL, "")
        if runner_alive(owner):
            raise RuntimeError(f"node {name} belongs to pod runner {owner}, which is alive: pick other pool names")
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        with contextlib.suppress(ApiException):
            core.delete_node(name)
        wait_gone(core, name)


def sweep_dead_roots(parent: Path) -> None:
    """Files of runners that died without `stop()` under `parent` (their id starts with their PID)."""
    for old in parent.glob("r*-*"):
        if not runner_alive(old.name):
            shutil.rmtree(old, ignore_errors=True)
