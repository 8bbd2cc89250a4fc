"""`ContainerRun`: one container's runtime record in a pod worker (its process, restarts, state,
probes) and the container status a kubelet reports from it."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from testsupport.pod_runner.probes import ProbeState

__all__ = ["ContainerRun"]


@dataclass
class ContainerRun:
    """One container's runtime record."""

    spec: Mapping[str, Any]
    init: bool = False
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    restarts: int = 0
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    started_at: str = ""
    started: bool = False
    ready: bool = False
    retry_at: float = 0.0
    probes: dict[str, ProbeState] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.proc is not None:
            out["containerID"] = f"day0-pod-runner://{self.proc.pid}"
        return out
