"""Container probes (httpGet, tcpSocket, exec) with the kubelet's timing and thresholds.

Why: KubeRay decides a Ray pod is up from its readiness probe (`GET /api/healthz` on the
dashboard agent), and restarts a wedged raylet through the liveness probe, so the runner must run
them as a kubelet does: after `initialDelaySeconds`, every `periodSeconds`, each bounded by
`timeoutSeconds`, flipping after `successThreshold` / `failureThreshold` results in a row;
liveness and readiness wait for the startup probe. gRPC probes are not supported (they fail).
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ProbeState", "check"]

Exec = Callable[[Sequence[str], float], int]  # (argv, timeout_s) -> exit code inside the container


def _port(value: Any, ports: Mapping[str, int]) -> int:
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    if str(value) in ports:
        return ports[str(value)]
    raise ValueError(f"probe port {value!r} names no containerPort")


def check(probe: Mapping[str, Any], *, pod_ip: str, ports: Mapping[str, int], run_exec: Exec) -> bool:
    """One probe attempt: True on success."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        if "httpGet" in probe:
            get = probe["httpGet"]
            host = get.get("host") or pod_ip
            scheme = str(get.get("scheme") or "HTTP").lower()
            url = f"{scheme}://{host}:{_port(get['port'], ports)}{get.get('path') or '/'}"
            headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or []}
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as resp:
                return 200 <= int(resp.status) < 400
        if "tcpSocket" in probe:
            tcp = probe["tcpSocket"]
            with socket.create_connection((tcp.get("host") or pod_ip, _port(tcp["port"], ports)), timeout=timeout):
                return True
        if "exec" in probe:
            return run_exec(list(probe["exec"]["command"]), timeout) == 0
    except (OSError, ValueError, urllib.error.URLError, subprocess.SubprocessError):
        return False
    return False  # grpc and unknown handlers


@dataclass
class ProbeState:
    """The result of one probe of one container over time."""

    spec: Mapping[str, Any]
    started_at: float = field(default_factory=time.monotonic)
    ok: bool = False
    successes: int = 0
    failures: int = 0
    next_at: float = 0.0

    def __post_init__(self) -> None:
        self.next_at = self.started_at + float(self.spec.get("initialDelaySeconds") or 0)

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def record(self, success: bool, now: float) -> bool:
        """Count one result; True when the probe's verdict (`ok`) flipped."""
        self.next_at = now + float(self.spec.get("periodSeconds") or 10)
        before = self.ok
        if success:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= int(self.spec.get("successThreshold") or 1):
                self.ok = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= int(self.spec.get("failureThreshold") or 3):
                self.ok = False
        return self.ok != before

    @property
    def failed(self) -> bool:
        """Failed `failureThreshold` times in a row (liveness/startup: restart the container)."""
        return self.failures >= int(self.spec.get("failureThreshold") or 3)
