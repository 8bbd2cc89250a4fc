"""Where a run of a spec keeps its results in the store: the run's id and folder, from the spec alone.

Contract: the identity `day0.runs` describes (the spec's fingerprint plus the day0 version, and the
namespace when it is not the users' `runs`). Apart from `day0.runs` so that `day0 plan`, which reads a
run's step-1 result and writes the run's plan, finds the folder without building the run records' models.
"""

import hashlib

import day0
from day0.spec.pipeline import PipelineSpec

__all__ = ["USER_RUNS", "run_folder", "run_id"]

USER_RUNS = "runs"


def run_id(spec: PipelineSpec, namespace: str = USER_RUNS) -> str:
    identity = f"{spec.fingerprint()}:{day0.__version__}" + ("" if namespace == USER_RUNS else f":{namespace}")
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


def run_folder(spec: PipelineSpec, run_id: str, namespace: str = USER_RUNS) -> str:
    return f"{namespace}/{spec.metadata.name}/{run_id}"
