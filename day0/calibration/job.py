"""Calibration as a job (`JOB`): the same `calibrate` in the flow's process or on the run's cluster,
where its workers are the accelerator pools' own; the profile lands in the run's store either way.

    python -m day0.calibration.job REQUEST_URL RESULT_URL
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from day0.backends.jobs import StepJob
from day0.calibration.run import CalibrationReport, calibrate
from day0.spec.cluster import PlatformSpec
from day0.store import open_store

__all__ = ["JOB", "CalibrationRequest", "main", "run_request"]


class CalibrationRequest(BaseModel):
    platform: PlatformSpec
    workers: int = Field(2, ge=1, description="Ray workers the collectives span.")
    store: str = Field(description="The artifact store the profile is written to (the run's).")
    on_cluster: bool = Field(False, description="Join the job's Ray cluster instead of a private local Ray.")


def run_request(request: CalibrationRequest, progress: Callable[[str], None] | None = None) -> CalibrationReport:
    if progress:
        progress(f"calibrating {request.platform.name} on {request.workers} worker(s)")
    return calibrate(
        request.platform,
        request.workers,
        open_store(request.store),
        address="auto" if request.on_cluster else None,
        progress=progress,
    )


JOB = StepJob("day0.calibration.job", CalibrationRequest, CalibrationReport, run_request)
main = JOB.main

if __name__ == "__main__":
    raise SystemExit(main())
