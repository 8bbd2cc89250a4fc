"""The `local` backend: a step's job runs in the flow's process; Ray, where a step uses it, is a
private local instance (`day0.backends.local.ray`) or the cluster at `cluster.address`."""

import time

from day0.backends.base import Req, Res
from day0.backends.jobs import StepJob
from day0.core.result import Execution, Progress

__all__ = ["LocalBackend"]


class LocalBackend:
    """The job's function in this process (Ray inside it, where the step uses Ray, is local)."""

    kind = "local"

    def __init__(self, address: str | None = None) -> None:
        self.address = address

    def run(self, step: str, job: StepJob[Req, Res], request: Req, progress: Progress) -> tuple[Res, Execution]:
        start = time.monotonic()
        result = job.run(request, progress)
        took = round(time.monotonic() - start, 3)
        return result, Execution(backend="local", cluster=self.address, duration_s=took)

    def close(self) -> None:
        pass
