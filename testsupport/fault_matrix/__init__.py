"""The fault matrix: inject each catalogued fault, run every validation layer on it, and record which
layer caught it, where it was localised and by what margin; clean runs over several seeds show the
false-alarm rate. For tests and the benchmark only (`tests/integration/test_fault_matrix.py`, `make bench`).

Why in-process: a full Ray Train run costs about a minute here; the layers judge the numbers a run
produces, not how it was scheduled, so each training runs `day0.steps.trial.loop.run_steps` (the body of
the Ray Train worker function) on a tiny scaled model for a few dozen steps: in this process for one
worker, in two spawned gloo processes for faults that live in the gradient all-reduce.

Modules: `catalogue` (what a fault is), `plugins` (the catalogue's kernels as `day0.platforms`
plugins, and the platforms made of them), `training` (the trainings), `layers` (the numerical,
convergence and performance layers, each the library's own judgement), `results` (rows, the
matrix and its table) and `matrix` (`run_matrix`).
"""

from testsupport.fault_matrix.catalogue import Catalogue, Fault
from testsupport.fault_matrix.matrix import run_matrix
from testsupport.fault_matrix.plugins import install_plugins
from testsupport.fault_matrix.results import Detection, FaultMatrix, MatrixRow

__all__ = [
    "Catalogue",
    "Detection",
    "Fault",
    "FaultMatrix",
    "MatrixRow",
    "install_plugins",
    "run_matrix",
]
