"""Calibration of a platform for the cost model: microbenchmarks on the platform's own workers.

Contract: `calibrate(platform, workers, store)` runs, through Ray (`day0.backends.local.connect` unless
an address is given), on `workers` Ray workers at once (as a data-parallel step runs them; the slowest
worker's figure counts): the host time per dispatched op, GEMMs by shape and dtype as a layer's forward
and backward runs them, the trial's foreach AdamW step, a device memory copy, and all-reduce,
all-gather and all-to-all by message size across the workers joined by the platform's
torch.distributed backend (gloo on the CPU, nccl on GPUs); it writes a `CalibratedProfile`
(`day0.planner.profile`) to the store, which `day0 plan` then uses, and returns a `CalibrationReport`
that sets each measured figure beside the datasheet's. The kernels (`kernels.py`) are plain functions
run inside the workers; `figures.py` holds the pure maths (bus bandwidth, medians).
"""

from day0.calibration.run import CalibrationError, CalibrationReport, CalibrationSizes, calibrate

__all__ = ["CalibrationError", "CalibrationReport", "CalibrationSizes", "calibrate"]
