"""Step 2, operators: every inventory op checked on the platform, gaps and faults adapted, then the
whole reduced-depth model compared layer by layer, then one step of the trial's own recipe on the
platform (`training_step`), so the ops the candidate meets at run time are adapted here first.

    from day0.steps.operators.checks import run_operators
    result = run_operators(analyzed.inventory, spec.platform, spec.validation, "bf16",
                           whole_model=WholeModel.from_analysis(analyzed))

Pure of side effects except reading the model config; the same function runs in-process (local
backend) and inside a Ray task on an accelerator worker (`day0.steps.operators.job`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from importlib.metadata import EntryPoint
from typing import TypeVar

from day0.core.dtypes import DTYPES
from day0.core.ops import OpInventory, OpRecord
from day0.core.precision import host_compute_dtype
from day0.core.result import Progress
from day0.platforms.kernels import ENTRY_POINT_GROUP, KernelTable, MissingKernelError, Platform, load_plugin_kernels
from day0.spec.cluster import PlatformSpec
from day0.steps.operators.adapt import adapt_op, adapt_report
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.layers import WholeModel, build_whole_model, compare_layers, reduced_params, slice_to
from day0.steps.operators.opcheck import check_inventory
from day0.steps.operators.result import LayerReport, OpCheck, OpCheckReport, OperatorsResult, TrainingStepCheck
from day0.steps.operators.shapes import ShapeInventory, check_shapes
from day0.steps.operators.training_step import check_training_step

__all__ = ["run_operators"]

_LEAST_TOKENS = (2, 32)
"""The whole-model and training-step checks' tokens where no production shape asks for more."""


def _adaptation_plugins(vendor: str | None, eps: list[EntryPoint] | None) -> tuple[KernelTable, list[str]]:
    """Kernels offered by every `day0.platforms` plugin except the platform's own (already active)."""
    from importlib.metadata import entry_points

    notes: list[str] = []
    table = KernelTable()
    candidates = eps if eps is not None else [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name != vendor]
    for ep in candidates:
        try:
            loaded = load_plugin_kernels([ep])
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the step
            notes.append(f"plugin {ep.name} failed to load: {exc}")
            continue
        for op in loaded.ops():
            for entry in reversed(loaded._entries[op]):
                table.register(op, entry.fn, source=entry.source, dtypes=entry.dtypes, reenter=entry.reenter)
    return table, notes


_MAX_RUNTIME_ADAPTATIONS = 20


def _runtime_record(exc: MissingKernelError | None, where: str) -> OpRecord | None:
    """An inventory record for an op a real run needs but the meta capture never saw (real tensors
    take data-dependent paths, e.g. attention-mask shortcuts), from the failing call."""
    if exc is None or not exc.op or exc.example is None:
        return None
    floats = [exc.dtype] if exc.dtype in DTYPES else []
    return OpRecord(op=exc.op, calls=1, phases=["forward"], dtypes=floats, modules=[where], examples=[exc.example])


R = TypeVar("R", LayerReport, TrainingStepCheck)


def _adapting(
    run: Callable[[], R],
    where: str,
    plat: Platform,
    dtype: str,
    validation: ValidationSpec,
    report: OpCheckReport,
    say: Progress,
    plugins: KernelTable | None,
) -> R:
    """`run()`, with each op it needs and the platform lacks adapted as met (when `plugins` is not
    None, i.e. adaptation is on) and the run repeated."""
    result = run()
    for _ in range(_MAX_RUNTIME_ADAPTATIONS if plugins is not None else 0):
        record = _runtime_record(result._missing, where)
        if record is None:
            break
        call_dtype = record.dtypes[0] if record.dtypes else "int"
        say(f"the {where} needs {record.op} at {call_dtype}: adapting")
        a = adapt_op(record, plat, call_dtype, validation, f"missing in the {where}: {result.error}", plugins, dtype)
        report.adaptations.append(a)
        if a.strategy is None:
            break
        result = run()
    return result


def _whole_model(
    whole: WholeModel,
    plat: Platform,
    dtype: str,
    validation: ValidationSpec,
    report: OpCheckReport,
    notes: list[str],
    say: Progress,
    max_params: int,
    plugins: KernelTable | None,
    tokens: tuple[int, int] = _LEAST_TOKENS,
) -> tuple[LayerReport | None, TrainingStepCheck | None]:
    """The layer comparison, then one step of the trial's recipe; ops either run needs and the
    platform lacks are adapted as met."""
    n, source = reduced_params(whole), whole.model.source
    depth = f"decoder layers {whole.keep_layers}"
    if n > max_params:
        whole = slice_to(whole, max_params)
        cut = ", ".join(f"{field} {value:,}" for field, value in whole.sliced.items())
        sliced = reduced_params(whole)
        notes.append(
            f"whole-model check and training step on a slice: {depth} at full width hold {n / 1e9:.2f}B parameters "
            f"(> {max_params / 1e9:.2f}B budget, validation.max_model_params); checked with {cut} "
            f"({sliced / 1e6:.0f}M parameters), every other width as released"
        )
        n = sliced
    batch, seq_len = tokens
    say(f"whole-model check: {depth}, {n / 1e6:.1f}M parameters, {batch} x {seq_len} tokens")
    model = build_whole_model(whole)
    adapting = partial(
        _adapting, plat=plat, dtype=dtype, validation=validation, report=report, say=say, plugins=plugins
    )
    layers = adapting(
        lambda: compare_layers(model, plat, dtype, validation, name=source, batch=batch, seq_len=seq_len),
        "whole-model run",
    )
    say(f"training step: the trial's recipe at {dtype} on {plat.name}")
    step = adapting(
        lambda: check_training_step(model, plat, dtype, validation, batch=batch, seq_len=seq_len), "training step"
    )
    return layers, step


def run_operators(
    inventory: OpInventory,
    platform: PlatformSpec | Platform,
    validation: ValidationSpec | None = None,
    compute_dtype: str | None = None,
    *,
    whole_model: WholeModel | None = None,
    adapt: bool = True,
    plugins: list[EntryPoint] | None = None,
    max_elements: int = 1 << 22,
    max_model_params: int | None = None,
    production: Sequence[ShapeInventory] = (),
    progress: Progress | None = None,
) -> OperatorsResult:
    """Check, adapt, re-check every op; then the accumulating ops again at each `production` shape
    (the trial's first), and the layer comparison and training step when `whole_model` is given, at
    the trial's tokens (at least `_LEAST_TOKENS`). `max_model_params`: `validation.max_model_params`
    unless given."""
    start = time.perf_counter()
    say = progress or (lambda _msg: None)
    validation = validation or ValidationSpec()
    dtype, fp8_note = host_compute_dtype(compute_dtype or inventory.compute_dtype)
    notes = [fp8_note] if fp8_note else []
    plat = platform if isinstance(platform, Platform) else Platform.from_spec(platform)
    notes += plat.notes
    if validation.tolerance == "msprobe":
        notes.append(
            f"ops judged by msprobe {validation.msprobe_version}'s standards, per op (its policy column); "
            "msprobe's are per API, so the whole-model and training-step checks keep torch's tolerances"
        )
    if plat.emulated_on:
        notes.append(f"no {plat.emulated_on} device here: the platform's operator library runs on the host CPU")
    say(f"checking {len(inventory.ops)} ops at {dtype} on {plat.name}")

    def tick(done: int, total: int, check: OpCheck) -> None:
        if done % 10 == 0 or done == total or not check.ok:
            say(f"{done}/{total} ops checked; {check.op}: {check.status}")

    report = check_inventory(inventory, plat, validation, [dtype], max_elements=max_elements, progress=tick)
    shipped = replace(plat, kernels=plat.kernels.copy())  # before adaptation registers its kernels in `plat`
    vendor = platform.vendor_plugin if isinstance(platform, PlatformSpec) else None
    if adapt and report.failing:
        say(f"adapting {len(report.failing)} failing/missing ops")
        table, plugin_notes = _adaptation_plugins(vendor, plugins)
        notes += plugin_notes
        report = adapt_report(report, inventory, plat, validation, table)
    shapes = check_shapes(list(production), plat, dtype, validation, say)
    max_params = max_model_params or validation.max_model_params
    trial = production[0].shape if production else None
    tokens = (
        (trial.batch, trial.seq_len)
        if trial and trial.batch * trial.seq_len > math.prod(_LEAST_TOKENS)
        else _LEAST_TOKENS
    )
    layer_report = training_step = live_layers = live_step = None
    if whole_model is not None:
        layer_report, training_step = _whole_model(
            whole_model,
            plat,
            dtype,
            validation,
            report,
            notes,
            say,
            max_params,
            _adaptation_plugins(vendor, plugins)[0] if adapt else None,
            tokens,
        )
        if any(a.strategy and a.cause == "wrong_numbers" for a in report.adaptations):
            # The adapted platform's checks say nothing of the vendor's kernels as they are: run them too.
            say("whole-model check and training step again, on the platform as shipped (wrong kernels live)")
            live_layers, live_step = _whole_model(
                whole_model, shipped, dtype, validation, report, [], say, max_params, None, tokens
            )
    real = None
    if whole_model is not None:
        from day0.steps.operators.real_weights import check_real_weights

        say("a layer of the release's real weights (streamed from its shards)")
        real = check_real_weights(whole_model, plat, dtype, validation)
    return OperatorsResult(
        ops=report,
        layers=layer_report,
        real_weights=real,
        training_step=training_step,
        layers_live=live_layers,
        training_step_live=live_step,
        production=shapes,
        notes=notes,
        seconds=time.perf_counter() - start,
    )
