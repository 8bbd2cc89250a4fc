"""Where a run of a spec keeps its results in the store: the run's id and folder, from the spec alone.

Contract: the identity `day0.runs` describes (the spec's fingerprint plus the day0 version, and the
namespace when it is not the users' `runs`). Apart from `day0.runs` so that `day0 plan`, which reads a
run's step-1 result and writes the run's plan, finds the folder without building the run records' models.
"""

import hashlib

import day0
from day0.spec.pipeline import PipelineSpec

__all__ = ["USER_RUNS", "reserved_namespace", "run_folder", "run_id"]

USER_RUNS = "runs"
# The store's own folders, beside the runs': the receiver's claims and queue, `day0 plan`'s structure
# cache, calibrated profiles, and the regression's baselines, history and reports. A run whose namespace
# lay in one would have its files read as claims, queue entries or baselines (the receiver turned a
# run's files into releases). The regression's own runs live in `regression/runs/<model>/<time>`.
_RESERVED = ("webhook", "structures", "calibration", "regression")
_REGRESSION_RUNS = "regression/runs/"


def reserved_namespace(namespace: str) -> str | None:
    """The store folder of its own that `namespace` would write into, or None when it is a run's."""
    top = namespace.split("/", 1)[0]
    if top not in _RESERVED or (namespace.startswith(_REGRESSION_RUNS) and namespace != _REGRESSION_RUNS):
        return None
    return top


def run_id(spec: PipelineSpec, namespace: str = USER_RUNS) -> str:
    identity = f"{spec.fingerprint()}:{day0.__version__}" + ("" if namespace == USER_RUNS else f":{namespace}")
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


def run_folder(spec: PipelineSpec, run_id: str, namespace: str = USER_RUNS) -> str:
    return f"{namespace}/{spec.metadata.name}/{run_id}"
