"""A private Ray head for tests: `ray start --head --block` on free ports, stopped through its own process.

Contracts: the head has its own ports and temp dir, so it never joins or disturbs another Ray
session on the machine. It is stopped by signalling its own process, then whatever is left of its
process group, never by `ray stop` (which would stop every Ray session here), and its temp dir is
removed. It yields the dashboard address that `day0.backends.jobs.run_job` submits to, the same
path the KubeRay backend takes to a head pod.

    from testsupport.ray import local_head
    with local_head() as address:
        run_job(address, "python -c 'print(1)'", timeout_s=60)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from day0.backends.jobs import job_client
from day0.core.ports import free_port

__all__ = ["local_head"]


@contextmanager
def local_head(num_cpus: int = 1, start_timeout_s: float = 120.0) -> Iterator[str]:
    """A private Ray head on this machine (own ports and temp dir); yields its dashboard address."""
    ray = Path(sys.executable).with_name("ray")
    dash, tmp = free_port(), tempfile.mkdtemp(prefix="d0ray", dir="/tmp")  # short: socket paths
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"), "RAY_USAGE_STATS_ENABLED": "0"}
    ports = {
        f"--{flag}={free_port()}"
        for flag in (
            "port",
            "dashboard-agent-listen-port",
            "ray-client-server-port",
            "metrics-export-port",
            "runtime-env-agent-port",
        )
    }
    cmd = [
        str(ray),
        "start",
        "--head",
        "--block",
        f"--num-cpus={num_cpus}",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dash}",
        f"--temp-dir={tmp}",
        "--disable-usage-stats",
        *sorted(ports),
    ]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        address = f"http://127.0.0.1:{dash}"
        job_client(address, timeout_s=start_timeout_s)
        yield address
    finally:
        # `ray start --block` stops its own processes on SIGTERM in a few seconds; signalled as a
        # group, its children ignore the shutdown for about 30 s instead.
        os.kill(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
