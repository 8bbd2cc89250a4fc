"""What every backend is: where a step sends its work, as a `StepJob`, and gets its result back.

    result, execution = ctx.backend.run("trial", TRIAL_JOB, request, progress=log.info)

Contract: `run` returns the job's result and where it ran (`Execution`), or raises `JobFailed`;
`close` releases what the backend holds (a RayCluster), on every path. A run's backend is opened by
`day0.backends.session.run_backend` and carried by the run's context (`RunContext.backend`).
"""

from typing import Protocol, TypeVar

from pydantic import BaseModel

from day0.backends.jobs import StepJob
from day0.core.result import Execution, Progress

__all__ = ["Backend", "JobFailed", "Req", "Res"]

Req = TypeVar("Req", bound=BaseModel)
Res = TypeVar("Res", bound=BaseModel)


class JobFailed(RuntimeError):
    """A step's Ray job ended without a result (failed, stopped or timed out): the step fails."""


class Backend(Protocol):
    kind: str

    def run(self, step: str, job: StepJob[Req, Res], request: Req, progress: Progress) -> tuple[Res, Execution]: ...

    def close(self) -> None: ...
