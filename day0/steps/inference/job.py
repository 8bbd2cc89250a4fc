"""Step 6 as a job: read an `InferenceRequest`, serve and benchmark, write the `InferenceResult`.

    python -m day0.steps.inference.job REQUEST_URL RESULT_URL   # store URLs (s3://..., file://...) or paths

Exit 0 with the result written (whatever its verdict), 2 for bad arguments, 1 when the work raised.
"""

from __future__ import annotations

import sys

from day0.backends.jobs import StepJob
from day0.steps.inference.result import InferenceResult
from day0.steps.inference.serve import InferenceRequest, run_inference

__all__ = ["JOB", "main"]

# The driver serves the model itself: on a cluster it runs on an accelerator worker pod.
JOB = StepJob(
    "day0.steps.inference.job", InferenceRequest, InferenceResult, run_inference, driver_uses_accelerator=True
)
main = JOB.main

if __name__ == "__main__":
    sys.exit(main())
