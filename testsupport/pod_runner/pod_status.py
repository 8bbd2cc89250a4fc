"""A pod's phase and conditions as a kubelet reports them, from its containers' runtime records.

- Phase: Pending while misconfigured or initialising (Failed when an init container failed under
  `restartPolicy: Never`), Running once a container has started and one still runs or waits,
  then Succeeded if every container exited 0, else Failed.
- Conditions: `PodReadyToStartContainers`, `Initialized`, `ContainersReady`, `Ready`, each with the
  time it last flipped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from testsupport.pod_runner.container import ContainerRun

__all__ = ["conditions", "phase", "timestamp"]


def timestamp() -> str:
    """A status timestamp (RFC 3339, seconds)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def phase(
    inits: Sequence[ContainerRun], mains: Sequence[ContainerRun], policy: str, error: tuple[str, str] | None
) -> str:
    """The pod's phase; `error` is a configuration error (reason, message), if any."""
    if error is not None:
        return "Pending"
    if not all(r.exit_code == 0 for r in inits):
        failed = policy == "Never" and any(r.exit_code not in (None, 0) for r in inits)
        return "Failed" if failed else "Pending"
    if any(r.proc is not None or r.state.get("waiting") for r in mains):
        return "Running" if any(r.started_at for r in mains) else "Pending"
    return "Succeeded" if all(r.exit_code == 0 for r in mains) else "Failed"


def conditions(
    inits: Sequence[ContainerRun],
    mains: Sequence[ContainerRun],
    error: tuple[str, str] | None,
    transitions: dict[str, tuple[str, str]],
) -> list[dict[str, Any]]:
    """The pod's conditions; `transitions` (condition -> (status, since)) is updated where one flipped."""
    initialized = all(r.exit_code == 0 for r in inits) and error is None
    ready = initialized and bool(mains) and all(r.ready for r in mains)

    def cond(kind: str, ok: bool) -> dict[str, Any]:
        status = "True" if ok else "False"
        if transitions.get(kind, ("", ""))[0] != status:  # the time it last flipped
            transitions[kind] = (status, timestamp())
        return {
            "type": kind,
            "status": status,
            "lastTransitionTime": transitions[kind][1],
            "lastProbeTime": None,
        }

    return [
        cond("PodReadyToStartContainers", True),
        cond("Initialized", initialized),
        cond("ContainersReady", ready),
        cond("Ready", ready),
    ]
