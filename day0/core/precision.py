"""Precision policy every step shares: the dtype vocabulary of the spec, what fp8 compute means on
a host without fp8 arithmetic, and the default per-dtype tolerances.

Contract: importable without torch (the spec imports it); the torch dtype tables are in
`day0.core.dtypes`. `host_compute_dtype` is the one place that decides fp8.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "COMPUTE_DTYPES",
    "DEFAULT_TOLERANCES",
    "DTYPE_BYTES",
    "FP8_KEPT_DTYPE",
    "DType",
    "host_compute_dtype",
    "kept_dtype",
]

DType = Literal["fp32", "bf16", "fp16", "fp8"]
"""Compute dtypes a spec may name (`fp64` is only ever a reference)."""
COMPUTE_DTYPES: tuple[DType, ...] = get_args(DType)

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per element of each compute dtype (here, not in `day0.core.dtypes`, so the planner needs no torch)."""

FP8_KEPT_DTYPE = "bf16"
"""fp8 training casts GEMM inputs to fp8 transiently and keeps weights, activations and every other
op in bf16 (DeepSeek-V3 tech report, sec. 3.3)."""

DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    # (rtol, atol): torch.testing.assert_close's defaults per dtype
    "fp32": (1.3e-6, 1e-5),
    "bf16": (1.6e-2, 1e-5),
    "fp16": (1e-3, 1e-5),
    "fp64": (1e-7, 1e-7),
}


def kept_dtype(dtype: str) -> str:
    """The dtype weights and activations are held in when computing at `dtype`."""
    return FP8_KEPT_DTYPE if dtype == "fp8" else dtype


def host_compute_dtype(dtype: str) -> tuple[str, str | None]:
    """(dtype the steps run `dtype` at here, note saying so or None). fp8 runs at bf16: what fp8
    training keeps outside its GEMMs, and the host has no fp8 arithmetic to check or train with."""
    if dtype != "fp8":
        return dtype, None
    return FP8_KEPT_DTYPE, (
        f"fp8 compute runs at {FP8_KEPT_DTYPE} here: fp8 training keeps {FP8_KEPT_DTYPE} "
        "outside its GEMMs, and fp8 GEMMs are not emulated on this host"
    )
