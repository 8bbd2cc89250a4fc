"""Per-operator checks: each inventory op, at the compute dtype on the platform, against the CPU
reference with identical seeded inputs; gradients too for differentiable ops.

Ops are classified first (`day0.steps.operators.op_policy`), because comparing everything numerically is
wrong for some of them: layout ops (views) are checked exactly and cheaply, ops that allocate
uninitialised memory or draw random numbers are only checked for shape and dtype (their values
mean nothing), everything else is compared with the metrics of `day0.steps.operators.metrics` against
per-dtype thresholds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from functools import partial, reduce
from typing import Literal

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from day0.core.dtypes import DTYPES, dtype_name
from day0.core.ops import (
    Call,
    OpInventory,
    OpRecord,
    build_call,
    cast_call,
    example_numel,
    op_name,
    resolve_op,
)
from day0.platforms.adapted import upcast_kernel
from day0.platforms.kernels import Kernel, MissingKernelError, Platform
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.inputs import call_numel, shrink_example
from day0.steps.operators.metrics import (
    ErrorMetrics,
    Thresholds,
    compare,
    verdict,
    within_control,
)
from day0.steps.operators.msprobe import MsprobeStandards, Standard, api_name
from day0.steps.operators.msprobe_judge import BENCH_STANDARDS, JUDGED_DTYPES, judge
from day0.steps.operators.op_policy import (
    accumulates,
    classify,
    msprobe_standards,
    norm_terms,
    op_thresholds,
    thresholds_for,
)
from day0.steps.operators.result import Kind, OpCheck, OpCheckReport

__all__ = ["ReferenceMode", "check_inventory", "check_op"]


class ReferenceMode(TorchDispatchMode):
    """The reference run of a whole model: an op with no kernel at the reference dtype (fp64
    `_grouped_mm` on the CPU) runs at fp32 instead, and is named in `downcast`."""

    def __init__(self) -> None:
        super().__init__()
        self.downcast: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except RuntimeError:
            if not any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in tree_leaves((args, kwargs))):
                raise
            self.downcast.add(op_name(func))
            return upcast_kernel(func, torch.float32)(*args, **kwargs)


def _outputs(out: object) -> list[torch.Tensor]:
    return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]


def _results(func: torch._ops.OpOverload, call: Call, out: object) -> list[torch.Tensor]:
    """What a call produced: its returned tensors; for an op that returns nothing, the tensors it
    wrote in place (an in-place foreach op such as AdamW's `_foreach_lerp_` returns `()`)."""
    if func._schema.returns:
        return _outputs(out)
    args, kwargs = call
    written = [
        args[i] if i < len(args) else kwargs.get(a.name)
        for i, a in enumerate(func._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]
    return _outputs(written)


def _run(func: Kernel, call: Call, platform: Platform | None) -> tuple[object, list[str]]:
    if platform is None:
        return func(*call[0], **call[1]), []
    with platform.mode() as mode:
        out = func(*call[0], **call[1])
    return out, sorted({src for (_, src) in mode.served})


def _compare_outputs(
    p_out: list[torch.Tensor], r_out: list[torch.Tensor], kind: Kind, t: Thresholds
) -> ErrorMetrics | None:
    if len(p_out) != len(r_out):
        raise AssertionError(f"platform returned {len(p_out)} tensors, reference {len(r_out)}")
    has_float = any(o.is_floating_point() for o in r_out)
    worst: ErrorMetrics | None = None
    for p, r in zip(p_out, r_out, strict=True):
        if p.shape != r.shape:
            raise AssertionError(f"output shape {tuple(p.shape)} != reference {tuple(r.shape)}")
        if kind == "nondeterministic" or (has_float and not r.is_floating_point()):
            continue  # uninitialised/random values; indices of sort/topk follow their values
        m = compare(p, r, t, p.dtype if p.is_floating_point() else None)
        worst = m if worst is None else worst.merge(m)
    return worst


Verdict = tuple[bool, str]
Judged = tuple[ErrorMetrics | None, Thresholds, Verdict | None]
"""One call's metrics, the thresholds torch's verdict takes, and msprobe's or the control's verdict
where either judged the call (`_against_control`)."""

STOCK = "the host's stock kernel"


def _against_control(
    op: str,
    m: ErrorMetrics | None,
    t: Thresholds,
    r_res: list[torch.Tensor],
    kind: Kind,
    stock: Callable[[], list[torch.Tensor]],
    factor: float,
    notes: set[str],
) -> Verdict | None:
    """Where torch's fixed tolerances fail a call of an accumulating op, the verdict against the
    control: the host's stock kernel at the platform's dtype on the same inputs, measured against the
    same reference (`metrics.within_control`). None where the fixed tolerances pass, the op rounds
    each element once (its fixed tolerance is scale-free: nothing to scale) or there is no control."""
    if m is None or not accumulates(op) or verdict(m, t)[0]:
        return None
    try:
        sm = _compare_outputs(stock(), r_res, kind, t)
    except Exception as exc:  # noqa: BLE001 - no host kernel at this dtype: the fixed tolerances judge
        notes.add(f"no control ({STOCK} failed: {_first_line(exc)})")
        return None
    return within_control(m, sm, factor, STOCK) if sm is not None else None


def _bench(func: torch._ops.OpOverload, call: Call) -> list[torch.Tensor]:
    """The host's stock kernel on the platform's inputs, at the platform's dtype: msprobe's GPU run."""
    host = cast_call(call, lambda d: d, "cpu")
    return _results(func, host, _run(func, host, None)[0])


def _msprobe(
    op: str,
    p_res: list[torch.Tensor],
    r_res: list[torch.Tensor],
    bench: Callable[[], list[torch.Tensor]],
    standards: MsprobeStandards,
    applied: set[str],
    notes: set[str],
    metrics: ErrorMetrics | None,
) -> Verdict | None:
    """msprobe's verdict on one call (every output judged by the standard its registry picks), or
    None where an output is one day0 cannot judge msprobe's way: torch's tolerances judge that call.
    `metrics`: torch's figures of the call, for what msprobe's verdict does not see."""
    api = api_name(op)
    picked: list[Standard] = [standards.standard(api, p.is_floating_point()) for p in p_res]
    if any((p.is_floating_point() or p.is_complex()) and p.dtype not in JUDGED_DTYPES for p in p_res):
        notes.add("torch's tolerances: msprobe skips fp64 and complex outputs")
        return None
    if "accumulative_error_compare" in picked:
        notes.add("torch's tolerances: day0 does not apply msprobe's accumulative_error_compare")
        return None
    b_res: list[torch.Tensor | None] = [None] * len(p_res)
    if against_host := sorted(BENCH_STANDARDS & set(picked)):
        try:
            b_res = list(bench())
        except Exception as exc:  # noqa: BLE001 - no host kernel at this dtype: msprobe has no GPU figure
            notes.add(
                f"torch's tolerances: msprobe's {against_host[0]} needs the host's kernel, which failed: "
                + _first_line(exc)
            )
            return None
    verdicts = [judge(std, api, p, r, b, standards) for std, p, r, b in zip(picked, p_res, r_res, b_res, strict=True)]
    applied.update(picked)
    listed = standards.listed(api)
    if listed is not None and listed not in picked and standards.float_outputs_benchmarked:
        notes.add(f"msprobe {standards.version} lists {api} as {listed} but benchmarks floating outputs first")
    failing = [v for v in verdicts if not v[0]]
    if not failing and "benchmark" in picked and metrics is not None and metrics.nan_inf_mismatch:
        notes.add(
            "NaN/Inf on one side only: msprobe's benchmark standard leaves such elements out of its metrics "
            "(torch's tolerances fail them)"
        )
    return failing[0] if failing else verdicts[0]


def _host_grads(func: torch._ops.OpOverload, call: Call, seed: int, cot_dtype: torch.dtype) -> list[torch.Tensor]:
    """The host's stock kernels' input gradients at the platform's dtype: msprobe's GPU backward."""
    got = _grads(func, cast_call(call, lambda d: d, "cpu", True), None, seed, cot_dtype)
    if got is None:
        raise RuntimeError("the host's kernel gave no gradients")
    return got


def _grads(
    func: Kernel, call: Call, platform: Platform | None, seed: int, cot_dtype: torch.dtype
) -> list[torch.Tensor] | None:
    """Input gradients for a seeded cotangent, rounded to the platform dtype so both sides get the same."""
    leaves = [a for a in tree_leaves(call) if isinstance(a, torch.Tensor) and a.requires_grad]
    out, _ = _run(func, call, platform)
    outs = [o for o in _outputs(out) if o.requires_grad]
    if not leaves or not outs:
        return None
    g = torch.Generator().manual_seed(seed + 7)
    cot = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(cot_dtype).to(o.dtype) for o in outs]
    if platform is None:
        got = torch.autograd.grad(outs, leaves, cot, allow_unused=True)
    else:
        with platform.mode():
            got = torch.autograd.grad(outs, leaves, cot, allow_unused=True)
    return [x if x is not None else torch.zeros(()) for x in got]


def _run_dtype(record: OpRecord, dtype: str, inventory_dtype: str) -> str:
    """What the op runs at: the compute dtype if the model ran it at its compute dtype, else the
    dtype it was recorded at (a bf16 model's fp32 router stays fp32), 'int' for integer-only ops."""
    if not record.dtypes:
        return "int"
    return dtype if inventory_dtype in record.dtypes else record.dtypes[0]


def _coarsest(*values: object) -> str:
    """The least precise floating dtype among the tensors in `values` ('fp32' if none)."""
    floats = {v.dtype for v in tree_leaves(values) if isinstance(v, torch.Tensor) and v.is_floating_point()}
    return dtype_name(max(floats, key=lambda d: torch.finfo(d).eps)) if floats else "fp32"


def _fail(result: OpCheck, status: str, reason: str, start: float) -> OpCheck:
    return result.model_copy(update={"status": status, "reason": reason, "seconds": time.perf_counter() - start})


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:150]}"


def check_op(
    record: OpRecord,
    platform: Platform,
    dtype: str,
    validation: ValidationSpec,
    inventory_dtype: str = "fp32",
    seeds: Iterable[int] = (0,),
    max_examples: int | None = None,
    max_elements: int = 1 << 22,
    grads: bool = True,
    shrink_first: Collection[int] = (),
) -> OpCheck:
    """Check one op at platform dtype `dtype` over its examples (the first `max_examples`, default
    all the capture kept) and seeds; never raises. Each call is judged by the thresholds of the
    dtype it ran at: a bf16 model's fp32 router by fp32's, not bf16's. A call over `max_elements` is
    sliced (`inputs.shrink_example`, the sizes in `shrink_first` first).

    Gradients (ops the model runs forward, with floating inputs and a derivative) are checked on
    the first example for every seed: the backward ops themselves are inventory ops with their own
    checks, so this catches composite errors at bounded cost."""
    start = time.perf_counter()
    kind = classify(record.op)
    run_dtype = _run_dtype(record, dtype, inventory_dtype)
    result = OpCheck(op=record.op, dtype=run_dtype, kind=kind, status="pass")
    try:
        func = resolve_op(record.op)
    except KeyError as exc:
        return _fail(result, "skipped", str(exc), start)
    ref = DTYPES[validation.reference_dtype]

    def to_platform(name: str) -> torch.dtype:
        return DTYPES[dtype] if name == inventory_dtype else DTYPES.get(name, torch.float32)

    do_grads = grads and kind == "compute" and not record.op.split(".")[0].endswith("_") and "forward" in record.phases
    judged: list[Judged] = []
    grad_judged: list[Judged] = []
    served: set[str] = set()
    notes: set[str] = set()
    standards = msprobe_standards(validation) if kind != "nondeterministic" else None
    applied: set[str] = set()
    for index, example in enumerate(record.examples[:max_examples]):
        if example_numel(example) > max_elements or call_numel(record.op, example) > max_elements:
            example = shrink_example(example, max_elements, lambda ex: call_numel(record.op, ex), shrink_first)
            if call_numel(record.op, example) > max_elements:
                return _fail(result, "skipped", f"cannot shrink below {max_elements} elements", start)
            notes.add(f"shrunk to {max_elements} elements")
        for seed in seeds:
            p_call = build_call(record.op, example, seed, dtype_for=to_platform, device=platform.device)
            r_call = cast_call(p_call, lambda _d: ref)
            try:
                r_out = _reference(func, r_call, ref, run_dtype, notes)
            except Exception as exc:  # noqa: BLE001 - the example is not runnable on the reference
                return _fail(result, "skipped", f"reference failed: {_first_line(exc)}", start)
            p_run = cast_call(p_call, lambda d: d, platform.device)
            try:
                p_out, src = _run(func, p_run, platform)
            except MissingKernelError as exc:
                return _fail(result, "missing", str(exc), start)
            except Exception as exc:  # noqa: BLE001 - a platform kernel that raises is a failed op
                return _fail(result, "error", _first_line(exc), start)
            served.update(src)
            result.examples += 1
            p_res, r_res = _results(func, p_run, p_out), _results(func, r_call, r_out)
            # the dtype the result is rounded to, and the terms a norm sums
            t = op_thresholds(record.op, _coarsest(p_res), validation, norm_terms(record.op, p_call))
            try:
                m = _compare_outputs(p_res, r_res, kind, t)
            except AssertionError as exc:
                return _fail(result.model_copy(update={"served_by": sorted(served)}), "fail", str(exc), start)
            ms = (
                _msprobe(record.op, p_res, r_res, partial(_bench, func, p_call), standards, applied, notes, m)
                if standards is not None
                else _against_control(
                    record.op, m, t, r_res, kind, partial(_bench, func, p_call), validation.control_factor, notes
                )
            )
            if m is not None or ms is not None:
                judged.append((m, t, ms))
            if do_grads and index == 0:
                gt = thresholds_for(_coarsest(p_call, p_out), validation)  # gradients are at the inputs' dtypes
                gm, status, note, grad_pair = _grad_check(func, p_call, r_call, platform, seed, DTYPES[dtype], kind, gt)
                if note:
                    notes.add(note)
                if status is not None:
                    result.grad_status, do_grads = status, False
                elif gm is not None:
                    host = partial(_host_grads, func, p_call, seed, DTYPES[dtype])
                    gms = (  # msprobe judges an API's input gradients by the standard of its outputs
                        _msprobe(record.op, *grad_pair, host, standards, applied, notes, gm)
                        if standards and grad_pair
                        else _against_control(
                            record.op, gm, _chained(gt), grad_pair[1], kind, host, validation.control_factor, notes
                        )
                        if grad_pair
                        else None
                    )
                    grad_judged.append((gm, gt, gms))
    if applied:
        result.policy = f"msprobe ({', '.join(sorted(applied))})"
    return _judge(result, judged, grad_judged, kind, served, notes, start)


def _reference(func: torch._ops.OpOverload, r_call: Call, ref: torch.dtype, run_dtype: str, notes: set[str]) -> object:
    try:
        return _run(func, r_call, None)[0]
    except RuntimeError:
        if run_dtype == "int":
            notes.add("reference ran at float (no integer kernel)")  # e.g. histc on int32
            return _run(upcast_kernel(func, ref), r_call, None)[0]
        if ref == torch.float64:
            notes.add("reference ran at fp32 (no fp64 kernel)")  # e.g. _grouped_mm on the CPU
            return _run(upcast_kernel(func, torch.float32), r_call, None)[0]
        raise


def _grad_check(
    func: torch._ops.OpOverload,
    p_call: Call,
    r_call: Call,
    platform: Platform,
    seed: int,
    cot_dtype: torch.dtype,
    kind: Kind,
    t: Thresholds,
) -> tuple[
    ErrorMetrics | None,
    Literal["skipped", "n/a"] | None,
    str | None,
    tuple[list[torch.Tensor], list[torch.Tensor]] | None,
]:
    """(metrics, terminal grad status or None, note, (the platform's gradients, the reference's))."""
    try:
        pg = _grads(func, cast_call(p_call, lambda d: d, platform.device, True), platform, seed, cot_dtype)
        rg = _grads(func, cast_call(r_call, lambda d: d, "cpu", True), None, seed, cot_dtype)
    except MissingKernelError as exc:
        # the backward kernels the model runs are inventory ops, checked on their own;
        # a derivative needing another op is not this model's gap
        return None, "skipped", f"gradient not checked: {exc}", None
    except RuntimeError:  # not differentiable (integer outputs, no derivative formula)
        return None, "n/a", None, None
    if pg is None or rg is None:
        return None, "n/a", None, None
    return _compare_outputs(pg, rg, kind, t), None, None, (pg, rg)


def _chained(t: Thresholds) -> Thresholds:
    """A gradient's thresholds: a chain of two rounded ops, so twice the RMS is forgiven."""
    return t.model_copy(update={"rms_share": min(1.0, 2 * t.rms_share)})


def _call_verdict(m: ErrorMetrics | None, t: Thresholds, ms: Verdict | None) -> Verdict:
    if ms is not None:
        return ms
    assert m is not None  # a call is recorded with torch's metrics, msprobe's verdict or both
    return verdict(m, t)


def _verdict(judged: list[Judged]) -> tuple[ErrorMetrics | None, bool, str]:
    """(worst metrics over the calls, passed, reason): the first failing call's reason, if any; msprobe's
    verdict where it judged a call, torch's (`metrics.verdict`) otherwise; "" when nothing was judged."""
    if not judged:
        return None, True, ""
    verdicts = [_call_verdict(*j) for j in judged]
    failing = [why for ok, why in verdicts if not ok]
    by_msprobe = [ms[1] for _, _, ms in judged if ms is not None]
    passing = (
        "within atol"
        if all(why == "within atol" for _, why in verdicts)
        else by_msprobe[0]
        if by_msprobe
        else "within tolerance"
    )
    metrics = [m for m, _, _ in judged if m is not None]
    worst = reduce(ErrorMetrics.merge, metrics) if metrics else None
    return worst, not failing, failing[0] if failing else passing


def _judge(
    result: OpCheck,
    judged: list[Judged],
    grad_judged: list[Judged],
    kind: Kind,
    served: set[str],
    notes: set[str],
    start: float,
) -> OpCheck:
    result.served_by = sorted(served)
    result.metrics, ok, why = _verdict(judged)
    if why:
        result.status, result.reason = ("pass" if ok else "fail"), why
    elif kind == "nondeterministic":
        result.reason = "values not compared: random or uninitialised memory; shape and dtype checked"
    result.grad_metrics, ok, why = _verdict([(m, _chained(t), ms) for m, t, ms in grad_judged])
    if why:
        result.grad_status = "pass" if ok else "fail"
        if not ok:
            result.reason = (result.reason + "; " if result.status == "fail" else "") + f"gradient: {why}"
    if notes:
        result.reason = "; ".join([result.reason, *sorted(notes)]).strip("; ")
    result.seconds = time.perf_counter() - start
    return result


def check_inventory(
    inventory: OpInventory,
    platform: Platform,
    validation: ValidationSpec | None = None,
    compute_dtypes: Iterable[str] | None = None,
    *,
    ops: Iterable[str] | None = None,
    max_examples: int | None = None,
    max_elements: int = 1 << 22,
    grads: bool = True,
    progress: Callable[[int, int, OpCheck], None] | None = None,
) -> OpCheckReport:
    """Check every op of `inventory` (or those named in `ops`) at each compute dtype;
    `progress(done, total, last_check)` after each op."""
    validation = validation or ValidationSpec()
    dtypes = list(compute_dtypes or [inventory.compute_dtype])
    wanted = set(ops) if ops is not None else None
    start = time.perf_counter()
    todo = [(d, r) for d in dtypes for r in inventory.ops if wanted is None or r.op in wanted]
    checks = []
    for dtype, record in todo:
        checks.append(
            check_op(
                record,
                platform,
                dtype,
                validation,
                inventory.compute_dtype,
                range(validation.seeds),
                max_examples,
                max_elements,
                grads,
            )
        )
        if progress is not None:
            progress(len(checks), len(todo), checks[-1])
    seconds = time.perf_counter() - start
    standards = msprobe_standards(validation)
    return OpCheckReport(
        tolerance=(
            f"msprobe {standards.version} ({standards.package} wheel sha256 {standards.wheel_sha256[:12]})"
            if standards
            else "torch"
        ),
        platform=platform.name,
        emulated_on=platform.emulated_on,
        compute_dtypes=dtypes,
        reference_dtype=validation.reference_dtype,
        seeds=validation.seeds,
        checks=checks,
        seconds=seconds,
        ops_per_second=len(checks) / seconds if seconds else 0.0,
    )
