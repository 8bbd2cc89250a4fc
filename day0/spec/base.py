"""The base of every model a user writes (the spec, platforms, clusters), and the plausibility
bounds the spec's figures share.

Contract: `UserModel` forbids unknown fields, coerces nothing (`seq_len: true` is an error), refuses
infinities and NaN in every float (`allow_inf_nan=False`: `.inf` is no bandwidth and no learning
rate), and refuses control characters (newlines, NUL ...) in every string (`Text`), so a name or a source a
user writes stays one line of text wherever it is shown. The bounds below are generous (several
times the largest hardware or published practice named beside each) and only catch nonsense, such
as a bandwidth of 1e-9 GB/s that turns a step into nine years.
"""

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

__all__ = [
    "BANDWIDTH_GBPS",
    "HBM_GBPS",
    "MAX_ACCELERATORS",
    "MAX_TIMEOUT_S",
    "MEMORY_GIB",
    "TFLOPS",
    "Text",
    "UserModel",
]

# Per-accelerator memory: largest shipping parts hold 192-288 GB of HBM (B200, MI355X); a CPU
# "accelerator" (one worker process) can be a host's whole memory. GiB.
MEMORY_GIB = (1 / 1024, 65_536)
# Dense peak per accelerator: a B200 gives about 2.25 PFLOP/s bf16 (4.5 fp8); a laptop core a few
# GFLOP/s. TFLOP/s.
TFLOPS = (1e-3, 100_000)
# Links between accelerators, GB/s: from a gigabit NIC's 0.125 (nothing trains over less) to
# 100 TB/s (NVLink 5 gives 1.8 TB/s per GPU).
BANDWIDTH_GBPS = (0.1, 100_000)
# Device memory bandwidth, GB/s: from 1 (below any DRAM channel since DDR2; a laptop's is tens) to
# 100 TB/s (an H200's HBM3e gives 4.8 TB/s, a B200's 8).
HBM_GBPS = (1, 100_000)
# Accelerators in one cluster: the largest reported training clusters have ~100k-200k GPUs.
MAX_ACCELERATORS = 1_048_576
# Timeouts: a week, the longest a Day-0 run is worth waiting for. Seconds.
MAX_TIMEOUT_S = 7 * 24 * 3600

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _one_line(value: str) -> str:
    if (m := _CONTROL.search(value)) is not None:
        raise ValueError(f"text holds a control character ({ord(m[0]):#04x}); expected one line of text")
    return value


# Every `str` a user model holds is `Text`, as a field, a dict key or value, or a list item (a test checks
# each model): the check sits on the strings alone, where a validator on every field would give pydantic a
# schema to build and a call to make for each number too.
Text = Annotated[str, AfterValidator(_one_line)]


class UserModel(BaseModel):
    """What every model a user writes shares (see the module contract)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True, allow_inf_nan=False)
