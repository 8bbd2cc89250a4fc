"""What every backend is: where a step sends its work, as a `StepJob`, and gets its result back.

    result, execution = ctx.backend.run("trial", TRIAL_JOB, request, progress=log.info)

Contract: `run` returns the job's result and where it ran (`Execution`), or raises `JobFailed`;
`close` releases what the backend holds (a RayCluster), on every path. A run's backend is opened by
`day0.backends.session.run_backend` and carried by the run's context (`RunContext.backend`).
"""

from typing import Protocol, TypeVar

from pydantic import BaseModel

from day0.backends.jobs import StepJob
from day0.core.result import Execution, Progress, StepResult

__all__ = ["Backend", "JobFailed", "Req", "Res", "run_step_job"]

Req = TypeVar("Req", bound=BaseModel)
Res = TypeVar("Res", bound=BaseModel)
StepRes = TypeVar("StepRes", bound=StepResult)


class JobFailed(RuntimeError):
    """A step's Ray job ended without a result (failed, stopped or timed out): the step fails."""


class Backend(Protocol):
    kind: str

    def run(self, step: str, job: StepJob[Req, Res], request: Req, progress: Progress) -> tuple[Res, Execution]: ...

    def close(self) -> None: ...


def run_step_job(backend: Backend, step: str, job: StepJob[Req, StepRes], request: Req, progress: Progress) -> StepRes:
    """A step's job on `backend`, its result stamped with where it ran (`StepResult.execution`)."""
    result, execution = backend.run(step, job, request, progress)
    return result.model_copy(update={"execution": execution})
