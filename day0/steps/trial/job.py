"""Step 5 as a job (`JOB`): `run_trial` from a plain-data request, in the flow's process or as a Ray
job on the run's cluster, where the Train workers land on the accelerator pools.

    python -m day0.steps.trial.job REQUEST_URL RESULT_URL   # as a submitted Ray job

The request carries what the task gathered from other steps (step 1's resolved model, the plan's
knobs, step 2's adaptations) and the test-only faults as data; the memory estimate, which needs step 3's cost model, is
added by the task to the result it gets back (`TrialResult.scaled_config` holds the model it needs).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from day0.backends.jobs import StepJob
from day0.backends.resources import train_worker_resources
from day0.model.source import ResolvedModel
from day0.spec.pipeline import PipelineSpec
from day0.steps.operators.result import Adaptation
from day0.steps.trial.faults import TrialFaults
from day0.steps.trial.result import TrialResult
from day0.steps.trial.train import TrialPlan, run_trial

__all__ = ["JOB", "TrialRequest", "main", "run_request"]


class TrialRequest(BaseModel):
    spec: PipelineSpec
    model: ResolvedModel
    checkpoint_uri: str = Field(description="Ray Train storage for both runs (the store's trial/checkpoints).")
    plan: TrialPlan = Field(default_factory=TrialPlan)
    max_failures: int = Field(2, ge=0)
    faults: TrialFaults | None = Field(None, description="Test-only faults injected into the candidate.")
    adaptations: list[Adaptation] = Field(
        default=[], description="Step 2's adaptations, applied to the candidate's platform kernels."
    )
    on_cluster: bool = Field(False, description="Join the job's Ray cluster instead of a private local Ray.")


def run_request(request: TrialRequest, progress: Callable[[str], None] | None = None) -> TrialResult:
    spec = request.spec
    return run_trial(
        spec,
        request.model,
        checkpoint_uri=request.checkpoint_uri,
        plan=request.plan,
        hooks=request.faults,
        adaptations=request.adaptations,
        max_failures=request.max_failures,
        progress=progress,
        ray_address="auto" if request.on_cluster else None,
        resources_per_worker=train_worker_resources(spec.platform, spec.cluster) if request.on_cluster else None,
    )


JOB = StepJob("day0.steps.trial.job", TrialRequest, TrialResult, run_request)
main = JOB.main

if __name__ == "__main__":
    raise SystemExit(main())
