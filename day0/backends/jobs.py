"""Ray job submission to a head's dashboard, shared by the local and KubeRay backends.

Why one module: jobs are `python -m day0....` entrypoints, and the only thing a backend changes
is the head address (`http://127.0.0.1:8265` locally, `http://<cluster>-head-svc.<ns>.svc:8265`
on Kubernetes). Submitting, waiting, stopping on timeout or cancellation, and keeping the tail of
the logs are the same everywhere.

    from day0.backends.jobs import run_job
    outcome = run_job("http://127.0.0.1:8265", "python -m day0.train --help", timeout_s=600)

A step's work is a `StepJob`: a request model in, a result model out, one function between them.
The local backend calls the function in the flow's process; a remote backend writes the request to
the artifact store, submits `python -m <module> REQUEST_URL RESULT_URL` through the head (the
module's `main = JOB.main`; the driver is placed on a worker node, see `DriverPlacement`), and reads
the result back: the same code on a laptop and on 256 nodes.
"""

from __future__ import annotations

import re
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, TypedDict, TypeVar, cast

from pydantic import BaseModel, Field

from day0.core import cancel
from day0.core.result import Progress
from day0.core.typing import JsonObject

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

    from day0.store import ArtifactStore

__all__ = [
    "DriverPlacement",
    "JobError",
    "JobOptions",
    "JobOutcome",
    "StepJob",
    "job_client",
    "read_url",
    "run_job",
    "submission_id",
    "submit",
    "wait",
    "write_url",
]

Req = TypeVar("Req", bound=BaseModel)
Res = TypeVar("Res", bound=BaseModel)

Terminal = Literal["SUCCEEDED", "FAILED", "STOPPED"]
_TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


class DriverPlacement(TypedDict, total=False):
    """Where a job's driver runs: Ray's entrypoint resource arguments of `submit_job`."""

    entrypoint_num_cpus: float
    entrypoint_num_gpus: float
    entrypoint_resources: dict[str, float]


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
    error_type: str | None = Field(
        None, description="Ray's JobErrorType for a failed job (e.g. JOB_SUPERVISOR_ACTOR_DIED)."
    )

    @property
    def ok(self) -> bool:
        return self.status == "SUCCEEDED"

    @property
    def driver_lost(self) -> bool:
        """The job died with its driver's node (its supervisor actor died), not of its own error."""
        return self.status == "FAILED" and self.error_type == "JOB_SUPERVISOR_ACTOR_DIED"


def _store_and_key(url: str) -> tuple[ArtifactStore, str]:
    from day0.store import open_store

    parent, _, name = url.rstrip("/").rpartition("/")
    if not name or "://" not in parent + "/":
        parent, name = f"file://{parent or '.'}", name
    return open_store(parent), name


def read_url(url: str) -> bytes:
    """The object at a store URL (`s3://bucket/key`, `file://dir/name` or a path)."""
    store, name = _store_and_key(url)
    return store.get_bytes(name)


def write_url(url: str, data: bytes) -> str:
    """Write an object at a store URL in one piece (atomic rename, or one S3 PUT)."""
    store, name = _store_and_key(url)
    return str(store.put_bytes(name, data, "application/json"))


@dataclass(frozen=True)
class StepJob(Generic[Req, Res]):
    """A step's work: `run(request, progress) -> result`, runnable in-process or as a Ray job."""

    module: str
    request_type: type[Req]
    result_type: type[Res]
    run: Callable[[Req, Progress], Res]
    # The job's driver itself works on an accelerator (step 6 serves from it), rather than only
    # coordinating Ray tasks and Train workers that ask for their own: a cluster places it accordingly.
    driver_uses_accelerator: bool = False

    def entrypoint(self, request_url: str, result_url: str) -> str:
        return f"python -m {self.module} {shlex.quote(request_url)} {shlex.quote(result_url)}"

    def main(self, argv: Sequence[str] | None = None) -> int:
        """The job's entrypoint: exit 0 with the result written (whatever its verdict), 2 for bad
        arguments, 1 when the work raised (the traceback is in the job's logs)."""
        args = list(sys.argv[1:] if argv is None else argv)
        if len(args) != 2:
            print(f"usage: python -m {self.module} REQUEST_URL RESULT_URL", file=sys.stderr)
            return 2
        request = self.request_type.model_validate_json(read_url(args[0]))
        result = self.run(request, lambda msg: print(msg, flush=True))
        print(f"result: {write_url(args[1], result.model_dump_json().encode())}", flush=True)
        return 0


def submission_id(run_id: str, step: str) -> str:
    """A readable unique id: `day0-<run>-<step>-<random>` (Ray ids allow [A-Za-z0-9_-])."""
    clean = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{run_id}-{step}").strip("-")[:80]
    return f"day0-{clean}-{secrets.token_hex(3)}"


def job_client(address: str, timeout_s: float = 60.0, *, auth_token: str | None = None) -> JobSubmissionClient:
    """A `JobSubmissionClient`, retried until the dashboard answers (a fresh head takes a while).
    `auth_token`: the head's Ray token, sent as a bearer token on every request (whatever this
    process's own `RAY_AUTH_MODE`: the SDK adds Ray's token only when this process is in token mode)."""
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    headers = {"Authorization": f"Bearer {auth_token}"} if auth_token else None
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return JobSubmissionClient(address, headers=headers)
        except AuthenticationError as exc:  # a refusal, not a head still starting: no retry
            why = "a wrong token" if auth_token else "no token"
            raise JobError(f"Ray dashboard at {address} refused a request with {why}: {exc.message}") from exc
        except (ConnectionError, RuntimeError) as exc:
            if time.monotonic() > deadline:
                raise JobError(f"Ray dashboard at {address} not reachable after {timeout_s:.0f} s: {exc}") from exc
            time.sleep(1.0)


def submit(
    client: JobSubmissionClient,
    entrypoint: str,
    *,
    sub_id: str | None = None,
    runtime_env: JsonObject | None = None,
    metadata: Mapping[str, str] | None = None,
    placement: DriverPlacement | None = None,
) -> str:
    """Submit `entrypoint` (a shell command run by a job supervisor: on the head, unless `placement`
    asks for resources only worker nodes have); return its id."""
    try:
        return str(
            client.submit_job(
                entrypoint=entrypoint,
                submission_id=sub_id,
                runtime_env=dict(runtime_env or {}),
                metadata=dict(metadata or {}),
                **(placement or {}),
            )
        )
    except Exception as exc:  # the SDK raises bare RuntimeError/HTTP errors
        raise JobError(f"submitting {entrypoint!r} failed: {exc}") from exc


def _tail(client: JobSubmissionClient, sub_id: str, lines: int) -> str:
    try:
        return "\n".join(str(client.get_job_logs(sub_id)).splitlines()[-lines:])
    except Exception:  # noqa: BLE001 - logs are best effort: the job result is what matters
        return ""


def wait(
    client: JobSubmissionClient,
    sub_id: str,
    timeout_s: float,
    *,
    poll_s: float = 1.0,
    log_lines: int = 50,
    started: float | None = None,
    on_log: Progress | None = None,
) -> JobOutcome:
    """Wait for a terminal status; on timeout stop the job and report `timed_out=True`.
    `on_log` gets each new line of the driver's output as it appears (the step's progress)."""
    start = time.monotonic() if started is None else started
    timed_out, seen = False, 0
    while True:
        info = client.get_job_info(sub_id)
        if on_log is not None:
            seen = _forward_logs(client, sub_id, seen, on_log)
        status = str(getattr(info.status, "value", info.status))
        if status in _TERMINAL:
            break
        cancel.raise_if_requested()  # run_job stops the job on the way out
        if time.monotonic() - start > timeout_s:
            timed_out = True
            client.stop_job(sub_id)
            status = _wait_stopped(client, sub_id)
            break
        time.sleep(poll_s)
    if on_log is not None:
        _forward_logs(client, sub_id, seen, on_log)
    return JobOutcome(
        submission_id=sub_id,
        address=str(client.get_address()),
        status=cast(Terminal, status),
        message=str(info.message or "") if not timed_out else f"stopped after {timeout_s:.0f} s timeout",
        timed_out=timed_out,
        duration_s=round(time.monotonic() - start, 3),
        logs_tail=_tail(client, sub_id, log_lines),
        error_type=str(getattr(info.error_type, "value", info.error_type))
        if getattr(info, "error_type", None)
        else None,
    )


def _forward_logs(client: JobSubmissionClient, sub_id: str, seen: int, on_log: Progress) -> int:
    try:
        lines = str(client.get_job_logs(sub_id)).splitlines()
    except Exception:  # noqa: BLE001 - progress is best effort; the terminal status is what counts
        return seen
    for line in lines[seen:]:
        on_log(line)
    return len(lines)


def _wait_stopped(client: JobSubmissionClient, sub_id: str, grace_s: float = 30.0) -> str:
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        status = str(getattr(client.get_job_status(sub_id), "value", ""))
        if status in _TERMINAL:
            return status
        time.sleep(0.5)
    return "STOPPED"


class JobOptions(TypedDict, total=False):
    """`run_job`'s optional arguments, as a caller that forwards them (`KubeRayCluster.run_job`) takes them."""

    sub_id: str | None
    runtime_env: JsonObject | None
    metadata: Mapping[str, str] | None
    placement: DriverPlacement | None
    poll_s: float
    on_log: Progress | None


def run_job(
    address: str,
    entrypoint: str,
    *,
    timeout_s: float,
    sub_id: str | None = None,
    runtime_env: JsonObject | None = None,
    metadata: Mapping[str, str] | None = None,
    placement: DriverPlacement | None = None,
    poll_s: float = 1.0,
    on_log: Progress | None = None,
    auth_token: str | None = None,
) -> JobOutcome:
    """Submit and wait (with the head's Ray token, if it has one). Cancellation (KeyboardInterrupt,
    task cancel) stops the job before re-raising, so no driver is left running on the cluster."""
    client = job_client(address, auth_token=auth_token)
    start = time.monotonic()
    job = submit(client, entrypoint, sub_id=sub_id, runtime_env=runtime_env, metadata=metadata, placement=placement)
    try:
        return wait(client, job, timeout_s, poll_s=poll_s, started=start, on_log=on_log)
    except BaseException:  # noqa: BLE001 - stop the job on any exit (Ctrl-C included), then re-raise
        try:
            client.stop_job(job)
        finally:
            raise
