"""Ray job submission to a head's dashboard, shared by the local and KubeRay backends.

Why one module: jobs are `python -m day0....` entrypoints, and the only thing a backend changes
is the head address (`http://127.0.0.1:8265` locally, `http://<cluster>-head-svc.<ns>.svc:8265`
on Kubernetes). Submitting, waiting, stopping on timeout or cancellation, and keeping the tail of
the logs are the same everywhere.

    from day0.backends.jobs import run_job
    outcome = run_job("http://127.0.0.1:8265", "python -m day0.train --help", timeout_s=600)
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Mapping
from typing import Any, Literal, cast

from pydantic import BaseModel, Field

__all__ = ["JobError", "JobOutcome", "connect", "run_job", "submission_id", "submit", "wait"]

Terminal = Literal["SUCCEEDED", "FAILED", "STOPPED"]
_TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


class JobError(RuntimeError):
    """The head could not be reached or refused the job (not a job that ran and failed)."""


class JobOutcome(BaseModel):
    """What a finished (or stopped) Ray job left behind: recorded in step results."""

    submission_id: str
    address: str
    status: Terminal
    message: str = Field("", description="Ray's status message (the error for FAILED).")
    timed_out: bool = False
    duration_s: float = Field(description="Wall time from submission to a terminal status.")
    logs_tail: str = Field("", description="Last lines of the driver's output.")

    @property
    def ok(self) -> bool:
        return self.status == "SUCCEEDED"


def submission_id(run_id: str, step: str) -> str:
    """A readable unique id: `day0-<run>-<step>-<random>` (Ray ids allow [A-Za-z0-9_-])."""
    clean = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{run_id}-{step}").strip("-")[:80]
    return f"day0-{clean}-{secrets.token_hex(3)}"


def connect(address: str, timeout_s: float = 60.0) -> Any:
    """A `JobSubmissionClient`, retried until the dashboard answers (a fresh head takes a while)."""
    from ray.job_submission import JobSubmissionClient

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return JobSubmissionClient(address)
        except (ConnectionError, RuntimeError) as exc:
            if time.monotonic() > deadline:
                raise JobError(f"Ray dashboard at {address} not reachable after {timeout_s:.0f} s: {exc}") from exc
            time.sleep(1.0)


def submit(
    client: Any,
    entrypoint: str,
    *,
    sub_id: str | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> str:
    """Submit `entrypoint` (a shell command run by the head's job supervisor); return its id."""
    try:
        return str(
            client.submit_job(
                entrypoint=entrypoint,
                submission_id=sub_id,
                runtime_env=dict(runtime_env or {}),
                metadata=dict(metadata or {}),
            )
        )
    except Exception as exc:  # the SDK raises bare RuntimeError/HTTP errors
        raise JobError(f"submitting {entrypoint!r} failed: {exc}") from exc


def _tail(client: Any, sub_id: str, lines: int) -> str:
    try:
        return "\n".join(str(client.get_job_logs(sub_id)).splitlines()[-lines:])
    except Exception:  # noqa: BLE001 - logs are best effort: the job result is what matters
        return ""


def wait(
    client: Any,
    sub_id: str,
    timeout_s: float,
    *,
    poll_s: float = 1.0,
    log_lines: int = 50,
    started: float | None = None,
) -> JobOutcome:
    """Wait for a terminal status; on timeout stop the job and report `timed_out=True`."""
    start = time.monotonic() if started is None else started
    timed_out = False
    while True:
        info = client.get_job_info(sub_id)
        status = str(getattr(info.status, "value", info.status))
        if status in _TERMINAL:
            break
        if time.monotonic() - start > timeout_s:
            timed_out = True
            client.stop_job(sub_id)
            status = _wait_stopped(client, sub_id)
            break
        time.sleep(poll_s)
    return JobOutcome(
        submission_id=sub_id,
        address=str(client.get_address()),
        status=cast(Terminal, status),
        message=str(info.message or "") if not timed_out else f"stopped after {timeout_s:.0f} s timeout",
        timed_out=timed_out,
        duration_s=round(time.monotonic() - start, 3),
        logs_tail=_tail(client, sub_id, log_lines),
    )


def _wait_stopped(client: Any, sub_id: str, grace_s: float = 30.0) -> str:
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        status = str(getattr(client.get_job_status(sub_id), "value", ""))
        if status in _TERMINAL:
            return status
        time.sleep(0.5)
    return "STOPPED"


def run_job(
    address: str,
    entrypoint: str,
    *,
    timeout_s: float,
    sub_id: str | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    metadata: Mapping[str, str] | None = None,
    poll_s: float = 1.0,
) -> JobOutcome:
    """Submit and wait. Cancellation (KeyboardInterrupt, task cancel) stops the job before re-raising,
    so no driver is left running on the head."""
    client = connect(address)
    start = time.monotonic()
    job = submit(client, entrypoint, sub_id=sub_id, runtime_env=runtime_env, metadata=metadata)
    try:
        return wait(client, job, timeout_s, poll_s=poll_s, started=start)
    except BaseException:  # noqa: BLE001 - stop the job on any exit (Ctrl-C included), then re-raise
        try:
            client.stop_job(job)
        finally:
            raise
