"""Dtype names and their torch dtypes and sizes: the one table every step reads.

Names are the spec's vocabulary (`fp32`, `bf16`, `fp16`, `fp8`, plus `fp64` for references).
"""

from __future__ import annotations

import torch

__all__ = ["DTYPES", "DTYPE_BYTES"]

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
                                   "fp64": torch.float64, "fp8": torch.float8_e4m3fn}
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
