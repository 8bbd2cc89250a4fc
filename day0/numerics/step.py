"""Step 2, operators: every inventory op checked on the platform, gaps and faults adapted, then the
whole reduced-depth model compared layer by layer.

    from day0.numerics.step import run_operators
    result = run_operators(analyzed.inventory, spec.platform, spec.validation, "bf16",
                           whole_model=WholeModel.from_analysis(analyzed))

Pure of side effects except reading the model config; the same function runs in-process (local
backend) and inside a Ray task on an accelerator worker (`day0.numerics.ray_job`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.metadata import EntryPoint

from day0.core.dtypes import DTYPES
from day0.core.ops import OpInventory, OpRecord
from day0.core.precision import host_compute_dtype
from day0.numerics.adapt import adapt_op, adapt_report
from day0.numerics.layers import WholeModel, build_model, compare_layers, reduced_params
from day0.numerics.opcheck import check_inventory
from day0.numerics.results import LayerReport, OpCheck, OpCheckReport, OperatorsResult
from day0.platforms.kernels import ENTRY_POINT_GROUP, KernelTable, Platform, load_plugin_kernels
from day0.spec import PlatformSpec, ValidationSpec

__all__ = ["MAX_MODEL_PARAMS", "run_operators"]

MAX_MODEL_PARAMS = 300_000_000
"""Largest reduced-depth model the whole-model check builds with real weights (fp32 on the host:
~1.2 GB of weights plus a copy per side and gradients)."""

Progress = Callable[[str], None]


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


def _runtime_record(layer_report: LayerReport) -> OpRecord | None:
    """An inventory record for an op the real run needs but the meta capture never saw (real
    tensors take data-dependent paths, e.g. attention-mask shortcuts), from the failing call."""
    exc = layer_report._missing
    if exc is None or not exc.op or exc.example is None:
        return None
    floats = [exc.dtype] if exc.dtype in DTYPES else []
    return OpRecord(
        op=exc.op, calls=1, phases=["forward"], dtypes=floats, modules=["whole-model run"], examples=[exc.example]
    )


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
) -> LayerReport | None:
    """The layer comparison; ops the real run needs and the platform lacks are adapted as met
    (when `plugins` is not None, i.e. adaptation is on) and the run repeated."""
    n, source = reduced_params(whole), whole.model.source
    depth = f"decoder layers {whole.keep_layers}"
    if n > max_params:
        notes.append(
            f"whole-model check skipped: {depth} at full width hold {n / 1e9:.1f}B parameters "
            f"(> {max_params / 1e9:.1f}B limit for this worker)"
        )
        return None
    say(f"whole-model check: {depth}, {n / 1e6:.1f}M parameters")
    model = build_model(whole)
    layer_report = compare_layers(model, plat, dtype, validation, name=source)
    for _ in range(_MAX_RUNTIME_ADAPTATIONS if plugins is not None else 0):
        record = _runtime_record(layer_report)
        if record is None:
            break
        call_dtype = record.dtypes[0] if record.dtypes else "int"
        say(f"the whole-model run needs {record.op} at {call_dtype}: adapting")
        a = adapt_op(
            record,
            plat,
            call_dtype,
            validation,
            f"missing in the whole-model run: {layer_report.error}",
            plugins,
            dtype,
        )
        report.adaptations.append(a)
        if a.strategy is None:
            break
        layer_report = compare_layers(model, plat, dtype, validation, name=source)
    return layer_report


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
    max_model_params: int = MAX_MODEL_PARAMS,
    progress: Progress | None = None,
) -> OperatorsResult:
    """Check, adapt, re-check every op; then the layer comparison when `whole_model` is given."""
    start = time.perf_counter()
    say = progress or (lambda _msg: None)
    validation = validation or ValidationSpec()
    dtype, fp8_note = host_compute_dtype(compute_dtype or inventory.compute_dtype)
    notes = [fp8_note] if fp8_note else []
    plat = platform if isinstance(platform, Platform) else Platform.from_spec(platform)
    notes += plat.notes
    if plat.emulated_on:
        notes.append(f"no {plat.emulated_on} device here: the platform's operator library runs on the host CPU")
    say(f"checking {len(inventory.ops)} ops at {dtype} on {plat.name}")

    def tick(done: int, total: int, check: OpCheck) -> None:
        if done % 10 == 0 or done == total or not check.ok:
            say(f"{done}/{total} ops checked; {check.op}: {check.status}")

    report = check_inventory(inventory, plat, validation, [dtype], max_elements=max_elements, progress=tick)
    vendor = platform.vendor_plugin if isinstance(platform, PlatformSpec) else None
    if adapt and report.failing:
        say(f"adapting {len(report.failing)} failing/missing ops")
        table, plugin_notes = _adaptation_plugins(vendor, plugins)
        notes += plugin_notes
        report = adapt_report(report, inventory, plat, validation, table)
    layer_report = None
    if whole_model is not None:
        layer_report = _whole_model(
            whole_model,
            plat,
            dtype,
            validation,
            report,
            notes,
            say,
            max_model_params,
            _adaptation_plugins(vendor, plugins)[0] if adapt else None,
        )
    return OperatorsResult(ops=report, layers=layer_report, notes=notes, seconds=time.perf_counter() - start)
