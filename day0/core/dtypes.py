"""Dtype names and their torch dtypes and sizes: the one table every step reads.

Names are the spec's vocabulary (`fp32`, `bf16`, `fp16`, `fp8`, plus `fp64` for references), and
the integer names the op-call notation records (`int64`, `bool` ...). The precision policy (fp8,
tolerances) is in `day0.core.precision`.
"""

from __future__ import annotations

import torch

from day0.core.precision import DTYPE_BYTES

__all__ = ["ALL_DTYPES", "DTYPES", "DTYPE_BYTES", "dtype_name"]

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp64": torch.float64,
    "fp8": torch.float8_e4m3fn,
}
"""Floating dtypes by name."""

ALL_DTYPES: dict[str, torch.dtype] = DTYPES | {
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
"""Every dtype an op-call example may record, by name."""

_NAMES: dict[torch.dtype, str] = {v: k for k, v in ALL_DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    """'fp32', 'bf16', 'int64' ...; torch's own name (without 'torch.') for any other dtype."""
    return _NAMES.get(dtype, str(dtype).removeprefix("torch."))
