"""Adapting ops a platform lacks or gets wrong, then checking them again.

Each strategy (`day0.platforms.adapted.STRATEGIES`, cheapest first: plugin, decomposition, upcast,
cpu_fallback) yields a kernel that is registered in the platform's kernel table (the same
dispatcher path a vendor kernel takes) only after the op passes its check again. The kernels are
built in `day0.platforms.adapted`, so the trial can rebuild what step 2 adapted from its result.
"""

from __future__ import annotations

from typing import Literal

import torch

from day0.core.dtypes import DTYPE_BYTES, DTYPES
from day0.core.ops import OpInventory, OpRecord, build_call, is_tensor_desc, resolve_op
from day0.platforms.adapted import STRATEGIES, make_kernel
from day0.platforms.kernels import KernelTable, Platform
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.opcheck import check_op
from day0.steps.operators.result import Adaptation, OpCheck, OpCheckReport

__all__ = ["HOST_LINK_GBPS", "STRATEGIES", "adapt_op", "adapt_report", "make_kernel"]

HOST_LINK_GBPS = 25.0  # PCIe 4.0 x16, the usual host<->accelerator link
DEVICE_MEM_GBPS = 1000.0  # order of an accelerator's HBM bandwidth; the ratio is what matters


def _int_dtypes(record: OpRecord) -> list[str]:
    """The integer dtypes an integer-only op runs at (so an upcast's fp32 call is not re-routed)."""
    return sorted({d["dtype"] for ex in record.examples for d in ex if is_tensor_desc(d)})


def _launches(record: OpRecord, platform: Platform, dtype: str, inventory_dtype: str) -> int:
    """Kernels one adapted call launches on the platform (the decomposition's cost)."""
    target = DTYPES[dtype]
    call = build_call(
        record.op,
        record.examples[0],
        0,
        dtype_for=lambda name: target if name == inventory_dtype else DTYPES.get(name, torch.float32),
        device=platform.device,
    )
    try:
        with platform.mode() as mode:
            resolve_op(record.op)(*call[0], **call[1])
    except Exception:  # noqa: BLE001 - cost is an estimate; the check already passed
        return 1
    return max(1, sum(n for (name, src), n in mode.served.items() if not src.startswith("adapt:")))


def _cost(strategy: str, record: OpRecord, platform: Platform, dtype: str, inventory_dtype: str) -> tuple[float, str]:
    b = DTYPE_BYTES.get(dtype, 4)  # 'int': int32-sized
    if strategy == "decomposition":
        n = _launches(record, platform, dtype, inventory_dtype)
        return float(n), f"{n} platform kernels per call (memory-bound estimate)"
    if strategy == "upcast":
        return (b + 8) / b, "casts in and out plus fp32 traffic (memory-bound estimate)"
    if strategy == "cpu_fallback":
        return DEVICE_MEM_GBPS / HOST_LINK_GBPS, f"host copies at {HOST_LINK_GBPS:g} GB/s vs device memory"
    return 1.0, "native kernel"


def adapt_op(
    record: OpRecord,
    platform: Platform,
    dtype: str,
    validation: ValidationSpec,
    problem: str,
    plugins: KernelTable | None = None,
    inventory_dtype: str = "fp32",
    strategies: tuple[str, ...] = STRATEGIES,
    cause: Literal["missing", "error", "wrong_numbers"] = "missing",
) -> Adaptation:
    """Try each strategy on a copy of the platform; keep the first whose re-check passes."""
    result = Adaptation(op=record.op, dtype=dtype, problem=problem, cause=cause)
    seeds = range(validation.seeds)
    for strategy in strategies:
        entry, note = make_kernel(strategy, record.op, platform, dtype, plugins)
        if entry is None:
            result.tried.append(f"{strategy}: {note}")
            continue
        trial = Platform(
            platform.name,
            platform.device,
            platform.library,
            platform.kernels.copy(),
            platform.emulated_on,
            platform.notes,
        )
        only = (_int_dtypes(record) or None) if dtype == "int" else [dtype]
        trial.kernels.register(
            record.op,
            entry.fn,
            source=entry.source if strategy == "plugin" else f"adapt:{strategy}",
            dtypes=only,
            reenter=entry.reenter,
        )
        recheck = check_op(record, trial, dtype if dtype != "int" else "fp32", validation, inventory_dtype, seeds)
        if not recheck.ok:
            result.tried.append(f"{strategy}: {recheck.status} ({recheck.reason[:80]})")
            continue
        platform.kernels = trial.kernels
        result.strategy, result.recheck = strategy, recheck
        result.overhead, result.cost_note = _cost(
            strategy, record, platform, dtype if dtype != "int" else "fp32", inventory_dtype
        )
        result.tried.append(f"{strategy}: pass ({note})")
        return result
    return result


def adapt_report(
    report: OpCheckReport,
    inventory: OpInventory,
    platform: Platform,
    validation: ValidationSpec,
    plugins: KernelTable | None = None,
    strategies: tuple[str, ...] = STRATEGIES,
) -> OpCheckReport:
    """Adapt every failing/missing op of `report`; failing checks are replaced by their re-checks."""
    records = inventory.by_name()
    checks: dict[int, OpCheck] = {}
    adaptations = list(report.adaptations)
    # backward-only ops first: a forward op's gradient check needs its backward kernels adapted
    order = sorted(
        range(len(report.checks)), key=lambda i: "forward" in records.get(report.checks[i].op, OpRecord(op="")).phases
    )
    for i in order:
        check = report.checks[i]
        if check.ok or check.op not in records:
            checks[i] = check
            continue
        if adaptations:  # its gradient may only have needed a backward op adapted meanwhile
            again = check_op(
                records[check.op],
                platform,
                check.dtype if check.dtype != "int" else "fp32",
                validation,
                inventory.compute_dtype,
                range(validation.seeds),
            )
            if again.ok:
                checks[i] = again.model_copy(
                    update={"reason": again.reason + "; passes once its backward ops are adapted"}
                )
                continue
        status = check.status if check.status != "pass" else check.grad_status
        problem = (
            f"{check.status}: {check.reason}"
            if check.status != "pass"
            else f"gradient {check.grad_status}: {check.reason}"
        )
        cause: Literal["missing", "error", "wrong_numbers"] = (
            "wrong_numbers" if status == "fail" else "error" if status == "error" else "missing"
        )
        a = adapt_op(
            records[check.op],
            platform,
            check.dtype,
            validation,
            problem,
            plugins,
            inventory.compute_dtype,
            strategies,
            cause,
        )
        adaptations.append(a)
        checks[i] = a.recheck if a.recheck is not None else check
    return report.model_copy(
        update={"checks": [checks[i] for i in range(len(report.checks))], "adaptations": adaptations}
    )
