"""The fault matrix: inject each catalogued fault, run every validation layer on it, and record which
layer caught it, where it was localised and by what margin; clean runs over several seeds show the
false-alarm rate. For tests and the benchmark only (`tests/test_fault_matrix.py`, `make bench`).

Why in-process: a full Ray Train run costs about a minute here; the layers judge the numbers a run
produces, not how it was scheduled, so each training runs `day0.steps.trial.loop.run_steps` (the body of
the Ray Train worker function) on a tiny scaled model for a few dozen steps: in this process for one
worker, in two spawned gloo processes for faults that live in the gradient all-reduce.

Layers, each the library's own judgement:
- numerical: step 2's per-op check (`day0.steps.operators.opcheck.check_inventory`, at step 2's shape cap)
  of the inventory ops the faulty platform serves with its own kernels; every other op runs the
  stock kernel, which the clean platform's check of the whole inventory covers (once, at a smaller
  shape cap: 87 ops in ~3 s instead of ~55 s). Caught = an op with wrong numbers (a missing or
  raising kernel is a gap step 2 adapts, not a wrong answer); localised at the op; margin = how far
  its worst metric is over its bound (RMS error or max relative error over rtol, 1 - cosine over
  1 - min cosine; NaN/Inf = infinite). A size-dependent fault needs the real cap: the bf16-
  accumulated norm passes on 64k-element shapes and fails on step 2's;
- convergence: step 5's alignment (`day0.steps.trial.alignment.compare_curves`, thresholds from the
  reference's noise) of the candidate (bf16 autocast, the platform's kernels, the faults) against
  the stock fp32 reference; localised at the step where the curves part; margin = the failing
  figure over its threshold;
- performance: each kernel the platform's table provides, timed on step 1's example call against
  the kernel it replaces (the vendor's previous, correct version); caught when slower by more than
  `PERF_THRESHOLD`; localised at the op. Timing is this thread's CPU time on one intra-op thread
  (other processes' load does not count, unlike wall time), the median of paired ratios of batches
  run back to back. Why per kernel: the whole-step CPU time of a 30-step trial moved by 8% between
  clean seeds here, too much to see a kernel 20% slower inside a step it is a third of. The clean
  rows time the correct kernel against itself.
"""

from __future__ import annotations

import math
import os
import queue
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from functools import cache
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from day0.core.dtypes import DTYPES
from day0.core.ops import resolve_op
from day0.core.ports import free_port
from day0.platforms.kernels import ENTRY_POINT_GROUP, Platform
from day0.spec import PlatformSpec, TrialScale, TrialTolerance, ValidationSpec
from day0.steps.trial.faults import TrialFaults
from day0.steps.trial.loop import LoopConfig, StepRecord

__all__ = [
    "Catalogue",
    "Detection",
    "Fault",
    "FaultMatrix",
    "MatrixRow",
    "install_plugins",
    "run_matrix",
]

Layer = Literal["numerical", "convergence", "performance"]
LAYERS: tuple[Layer, ...] = ("numerical", "convergence", "performance")
STEPS, WARMUP, SEEDS = 30, 8, (0, 1, 2)
TOLERANCE = TrialTolerance(warmup_steps=WARMUP)  # the spec's defaults, warm-up scaled to a 30-step trial
PERF_THRESHOLD = 0.15  # three times the worst clean deviation measured here (+5.5%, the kernel against itself)
PERF_REPEATS, PERF_BATCH_S = 15, 0.01
CLEAN_MAX_ELEMENTS = 1 << 16  # the clean platform's whole-inventory check (see the module docstring)


class Fault(BaseModel):
    """One catalogue entry: what is injected and which layer is expected to catch it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    layer: Layer = Field(description="The layer expected to catch it.")
    description: str
    kernel: str | None = Field(None, description="Plugin entry point target `module:function` (a platform fault).")
    training: TrialFaults | None = Field(None, description="Training bugs injected through the loop's hooks.")
    workers: int = Field(1, ge=1, le=2, description="Data-parallel workers (2: the fault is in the all-reduce).")
    baseline_kernel: str | None = Field(None, description="The correct kernel a performance fault is timed against.")
    expect_at: str | None = Field(None, description="Where it should be localised (an op, or 'step N').")


class Catalogue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="Where the faults are modelled from.")
    faults: list[Fault]


class Detection(BaseModel):
    layer: Layer
    caught: bool
    localised_at: str | None = None
    margin: float | None = Field(None, description="Observed over threshold: > 1 is caught (inf for NaN).")
    detail: str = ""


class MatrixRow(BaseModel):
    fault: str
    expected: Layer | None = Field(description="None for a clean run.")
    detections: list[Detection]

    @property
    def caught_by(self) -> list[Layer]:
        return [d.layer for d in self.detections if d.caught]

    def detection(self, layer: Layer) -> Detection | None:
        return next((d for d in self.detections if d.layer == layer), None)


class FaultMatrix(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="strings")

    rows: list[MatrixRow]
    clean: list[MatrixRow] = Field(description="Clean runs (one per seed and setup): any caught is a false alarm.")
    seconds: float

    @property
    def detection_rate(self) -> float:
        rows = [r for r in self.rows if r.expected is not None]
        return sum(r.expected in r.caught_by for r in rows) / len(rows) if rows else 0.0

    @property
    def false_alarms(self) -> int:
        return sum(bool(r.caught_by) for r in self.clean)

    def table(self) -> str:
        lines = [
            "| fault | expected layer | caught by | localised at | margin to the threshold |",
            "|---|---|---|---|---:|",
        ]
        for r in self.rows + self.clean:
            d = r.detection(r.expected) if r.expected else None
            lines.append(
                f"| {r.fault} | {r.expected or 'none (clean)'} | {', '.join(r.caught_by) or 'nothing'} | "
                f"{(d.localised_at if d else None) or '-'} | {_margin(d)} |"
            )
        return "\n".join(lines)


def _margin(d: Detection | None) -> str:
    if d is None or d.margin is None:
        return "-"
    return "NaN/Inf" if math.isinf(d.margin) else f"{d.margin:.2f}x"


# --- installing the catalogue's kernels as plugins ---------------------------------------------------


def install_plugins(faults: Iterable[Fault], site: Path, module_dirs: Iterable[Path]) -> list[str]:
    """Write a dist-info under `site` offering each fault's kernels as `day0.platforms` entry points
    (named after the fault; baselines as `<name>-baseline`) and put `site` and `module_dirs` on the
    path of this process and of processes it starts. Returns the path entries added."""
    info = site / "day0_fault_catalogue-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: day0-fault-catalogue\nVersion: 0.1\n")
    lines = ["[day0.platforms]"]
    for f in faults:
        lines += [f"{f.name} = {f.kernel}"] if f.kernel else []
        lines += [f"{f.name}-baseline = {f.baseline_kernel}"] if f.baseline_kernel else []
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    paths = [str(site), *map(str, module_dirs)]
    sys.path[:0] = [p for p in paths if p not in sys.path]
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])
    return paths


def _platform(name: str | None) -> PlatformSpec | None:
    """The CPU platform with plugin `name` as its vendor plugin (None: no platform table)."""
    from day0.paths import CONFIGS_DIR
    from day0.spec import load_yaml

    if name is None:
        return None
    spec = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "cpu.yaml"))
    return spec.model_copy(update={"name": f"cpu+{name}", "vendor_plugin": name})


# --- training -------------------------------------------------------------------------------------


@cache
def _tokens() -> torch.Tensor:
    from day0.steps.trial.data import prepare_data
    from day0.steps.trial.train import TRIAL_VOCAB

    return torch.as_tensor(prepare_data(None, TRIAL_VOCAB).tokens)


@cache
def _model_config() -> dict[str, Any]:
    from day0.core.model_source import resolve_model_source
    from day0.steps.trial.data import prepare_data
    from day0.steps.trial.model import scale_config
    from day0.steps.trial.train import TRIAL_VOCAB

    data = prepare_data(None, TRIAL_VOCAB)
    return scale_config(
        resolve_model_source("tiny-deepseek-v3").config,
        TrialScale(layers=2, hidden=64, experts=4),
        vocab_size=data.vocab_size,
        seq_len=32,
        eos_token_id=data.eos_token_id,
    )


def _loop(seed: int, **update: Any) -> LoopConfig:
    fields: dict[str, Any] = {
        "model_config_dict": _model_config(),
        "seed": seed,
        "steps": STEPS,
        "global_batch": 4,
        "micro_batch": 4,
        "seq_len": 32,
        "learning_rate": 3e-3,
        "lr_warmup_steps": 2,
        "checkpoint_every": STEPS,
    }
    return LoopConfig(**(fields | update))


def _rank(rank: int, world: int, port: int, cfg: dict[str, Any], hooks: TrialFaults | None, out: Any) -> None:
    """One spawned gloo rank of a 2-worker run (what a Ray Train worker does, without Ray)."""
    import torch.distributed as dist

    from day0.steps.trial.loop import run_steps

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        history = run_steps(
            LoopConfig.model_validate(cfg), _tokens(), rank=rank, world=world, distributed=True, hooks=hooks
        )
        if rank == 0:
            out.put(history)
    finally:
        dist.destroy_process_group()


def train(cfg: LoopConfig, workers: int = 1, hooks: TrialFaults | None = None) -> list[StepRecord]:
    """The loop on `workers` ranks: in this process for one, spawned gloo processes for two."""
    from day0.steps.trial.loop import run_steps

    if workers == 1:
        return [StepRecord.model_validate(h) for h in run_steps(cfg, _tokens(), hooks=hooks)]
    ctx = torch.multiprocessing.get_context("spawn")
    out, port = ctx.Queue(), free_port()
    cfg = cfg.model_copy(update={"micro_batch": cfg.global_batch // workers})
    procs = [ctx.Process(target=_rank, args=(r, workers, port, cfg.model_dump(), hooks, out)) for r in range(workers)]
    for p in procs:
        p.start()
    history = None
    while history is None:
        try:
            history = out.get(timeout=1)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                for p in procs:
                    p.kill()
                codes = [p.exitcode for p in procs]
                raise RuntimeError(f"a rank of the {workers}-worker run died: exit codes {codes}") from None
    for p in procs:
        p.join(timeout=60)
    return [StepRecord.model_validate(h) for h in history]


# --- the layers -----------------------------------------------------------------------------------


def numerical(platform: Platform, clean_failing: set[str], dtype: str = "bf16") -> Detection:
    """Step 2's per-op check on `platform` (the clean CPU: every op; else the ops its table serves):
    ops with wrong numbers here and not on the clean platform."""
    from day0.steps.operators.op_policy import thresholds_for
    from day0.steps.operators.opcheck import check_inventory

    validation = ValidationSpec(seeds=2)
    inventory = _inventory()
    if platform.kernels.ops():
        ops = [op for op in platform.kernels.ops() if op in inventory.by_name()]
        if not ops:
            return Detection(layer="numerical", caught=False, detail="its kernels serve no op of step 1's inventory")
        report = check_inventory(inventory, platform, validation, [dtype], ops=ops)
    else:
        report = check_inventory(inventory, platform, validation, [dtype], max_elements=CLEAN_MAX_ELEMENTS)
    # wrong numbers only: a kernel that is missing or raises is a gap step 2 adapts, not a wrong answer
    bad = [c for c in report.checks if "fail" in (c.status, c.grad_status)]
    bad = [c for c in bad if c.op not in clean_failing]
    if not bad:
        return Detection(layer="numerical", caught=False, detail=f"{len(report.checks)} ops checked, none failing")
    t = thresholds_for(dtype, validation)

    def over(c: Any) -> float:
        m = c.metrics if c.status != "pass" else c.grad_metrics
        if m is None or m.nan_inf_mismatch:
            return math.inf
        return max(m.rel_rmse / t.rtol, (1 - m.cosine) / (1 - t.min_cosine), m.max_rel / t.rtol)

    worst = max(bad, key=over)
    return Detection(
        layer="numerical",
        caught=True,
        localised_at=", ".join(sorted(c.op for c in bad)),
        margin=over(worst),
        detail=f"{worst.op} at {dtype}: {worst.reason[:160]}",
    )


@cache
def _inventory():
    from day0.core.model_source import resolve_model_source
    from day0.core.modeling import build_meta_model, load_hf_config
    from day0.core.structure import analyze_structure
    from day0.steps.analyze.inventory import capture_operators

    model = build_meta_model(load_hf_config(resolve_model_source("tiny-deepseek-v3")), "tiny-deepseek-v3", "fp32")
    return capture_operators(model, analyze_structure(model, "tiny-deepseek-v3").attention_kind, "fp32")


def convergence(reference: list[StepRecord], candidate: list[StepRecord]) -> Detection:
    """Step 5's alignment with thresholds from the reference's own noise."""
    from day0.steps.trial.alignment import compare_curves, reference_noise

    ref_loss, ref_grad = [h.loss for h in reference], [h.grad_norm for h in reference]
    a = compare_curves(
        ref_loss,
        [h.loss for h in candidate],
        reference_grad_norm=ref_grad,
        candidate_grad_norm=[h.grad_norm for h in candidate],
        tolerance=TOLERANCE,
        noise=reference_noise(ref_loss, ref_grad, WARMUP),
    )
    ratios = [a.loss_mean_rel_error / a.loss_threshold]
    ratios += [a.first_step_abs_diff / TOLERANCE.first_step_abs] if not a.first_step_ok else []
    if a.grad_norm_median_rel_error is not None and a.grad_norm_threshold:
        ratios.append(a.grad_norm_median_rel_error / a.grad_norm_threshold)
    return Detection(
        layer="convergence",
        caught=not a.passed,
        localised_at=f"step {a.parted_at_step} ({a.parted_metric})" if a.parted_at_step else None,
        margin=max(ratios) if all(math.isfinite(r) for r in ratios) else math.inf,
        detail="; ".join(a.failures) or f"aligned: loss {a.loss_mean_rel_error:.3%} < {a.loss_threshold:.2%}",
    )


def _batch_seconds(platform: Platform, op: str, dtype: str, call: Any, n: int) -> float:
    """CPU time of `n` calls of the kernel `platform` runs for `op` (its table's, else the stock
    one), called directly: the dispatch mode's own overhead would dilute the kernel's difference."""
    entry = platform.kernels.lookup(op, dtype)
    fn = entry.fn if entry is not None else resolve_op(op)
    t0 = time.thread_time()
    for _ in range(n):
        fn(*call[0], **call[1])
    return time.thread_time() - t0


def _slowdown(platform: Platform, baseline: Platform, op: str, dtype: str, call: Any) -> float:
    """Median over paired, interleaved repeats of `platform`'s kernel CPU time over `baseline`'s, minus one."""
    once = max(_batch_seconds(baseline, op, dtype, call, 1), 1e-6)
    n = max(1, int(PERF_BATCH_S / once))
    ratios = []
    for _ in range(PERF_REPEATS):  # paired and interleaved: a slow moment of the host hits both sides
        base = _batch_seconds(baseline, op, dtype, call, n)
        ratios.append(_batch_seconds(platform, op, dtype, call, n) / max(base, 1e-9))
    return statistics.median(ratios) - 1


def performance(platform: Platform, baseline: Platform, dtype: str = "bf16") -> Detection:
    """Each of `platform`'s table kernels on step 1's example call, against `baseline`'s for the op."""
    from day0.core.ops import build_call

    records = _inventory().by_name()
    ops = [op for op in platform.kernels.ops() if op in records]
    slower: dict[str, float] = {}
    target = DTYPES[dtype]

    def dtype_for(name: str) -> torch.dtype:  # the inventory's fp32 becomes the compute dtype
        return target if name == "fp32" else DTYPES.get(name, torch.float32)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # this thread's CPU time is the kernel's only when it does all the work
    try:
        for op in ops:
            slower[op] = _slowdown(
                platform, baseline, op, dtype, build_call(op, records[op].examples[0], 0, dtype_for=dtype_for)
            )
    finally:
        torch.set_num_threads(threads)
    if not slower:
        return Detection(layer="performance", caught=False, detail="no table kernel on step 1's ops to time")
    worst = max(slower, key=slower.__getitem__)
    caught = slower[worst] > PERF_THRESHOLD
    return Detection(
        layer="performance",
        caught=caught,
        localised_at=worst if caught else None,
        margin=max(slower[worst], 0.0) / PERF_THRESHOLD,
        detail=", ".join(f"{op} {v:+.1%}" for op, v in slower.items())
        + f" CPU time vs the kernel replaced (threshold {PERF_THRESHOLD:.0%})",
    )


# --- the matrix -----------------------------------------------------------------------------------


def _candidate(seed: int, fault: Fault | None = None, kernel: str | None = None) -> LoopConfig:
    """The candidate: bf16 autocast, under the platform made of plugin `kernel` (or the fault's)."""
    name = kernel or (fault.name if fault and fault.kernel else None)
    return _loop(seed, compute_dtype="bf16", platform=_platform(name))


def _step2_platform(plugin: str) -> Platform:
    """The platform step 2 checks: the CPU with the installed plugin `plugin` as its kernels."""
    from importlib.metadata import entry_points

    eps: list[EntryPoint] = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == plugin]
    spec = _platform(plugin)
    if not eps or spec is None:
        raise LookupError(f"plugin {plugin!r} is not installed: call install_plugins first")
    return Platform.from_spec(spec, plugins=eps)


def _row(
    fault: Fault,
    seed: int,
    reference: list[StepRecord],
    clean_failing: set[str],
) -> MatrixRow:
    detections = []
    if fault.kernel:
        detections.append(numerical(_step2_platform(fault.name), clean_failing))
    history = train(_candidate(seed, fault), fault.workers, fault.training)
    detections.append(convergence(reference, history))
    if fault.baseline_kernel:
        detections.append(performance(_step2_platform(fault.name), _step2_platform(f"{fault.name}-baseline")))
    return MatrixRow(fault=fault.name, expected=fault.layer, detections=detections)


def run_matrix(
    faults: list[Fault], seeds: Iterable[int] = SEEDS, progress: Callable[[str], None] | None = None
) -> FaultMatrix:
    """Every fault through every layer that applies, and clean runs over `seeds`. The kernels of
    `faults` must be installed (`install_plugins`)."""
    say, t0 = progress or (lambda _m: None), time.perf_counter()
    seeds = list(seeds)
    clean_report = numerical(Platform("cpu"), set())
    clean_failing = set((clean_report.localised_at or "").split(", ")) - {""}
    clean: list[MatrixRow] = [
        MatrixRow(fault="clean platform, step 2 per-op check", expected=None, detections=[clean_report])
    ]
    references: dict[int, list[StepRecord]] = {}
    for seed in seeds:
        say(f"clean seed {seed}")
        references[seed] = train(_loop(seed))
        cand = train(_candidate(seed))
        clean.append(
            MatrixRow(
                fault=f"clean, seed {seed} (bf16 x1)", expected=None, detections=[convergence(references[seed], cand)]
            )
        )
    if any(f.workers == 2 for f in faults):
        say("clean 2 workers")
        clean.append(
            MatrixRow(
                fault="clean, seed 0 (bf16 x2, gloo all-reduce)",
                expected=None,
                detections=[convergence(references[seeds[0]], train(_candidate(seeds[0]), 2))],
            )
        )
    for f in faults:
        if f.baseline_kernel:
            say(f"performance: {f.name}'s baseline kernel against itself")
            baseline = _step2_platform(f"{f.name}-baseline")
            clean += [
                MatrixRow(
                    fault=f"clean, repeat {i} ({f.name}'s baseline kernel timed against itself)",
                    expected=None,
                    detections=[performance(baseline, _step2_platform(f"{f.name}-baseline"))],
                )
                for i in range(len(seeds))
            ]
    rows = []
    for f in faults:
        say(f"fault {f.name}")
        rows.append(_row(f, seeds[0], references[seeds[0]], clean_failing))
    return FaultMatrix(rows=rows, clean=clean, seconds=time.perf_counter() - t0)
