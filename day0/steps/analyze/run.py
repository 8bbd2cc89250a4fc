"""Step 1, analyze: what is this model, which operators does it run, which does the platform lack?

`analyze_model(model_spec, platform, compute_dtype)` -> `AnalyzeResult` (structure + operator
inventory + coverage diff). Pure of side effects except reading the model source and the platform's
library packages (cached wheels or committed snapshots; `day0.platforms.libraries`). `run(ctx, progress)`
is the step for a run: the spec's model on its platform at the training's compute dtype.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from day0.core.ops import OpInventory
from day0.core.precision import host_compute_dtype
from day0.core.result import Progress
from day0.model.build import build_meta_model, load_hf_config
from day0.model.release import check_release
from day0.model.source import ResolvedModel, hub_offline, resolve_model
from day0.model.structure import analyze_structure
from day0.platforms.libraries.resolve import resolve_library
from day0.runs.context import RunContext
from day0.settings import HubSettings
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import ModelSpec
from day0.steps.analyze.coverage import diff_library
from day0.steps.analyze.inventory import capture_operators
from day0.steps.analyze.probe import probe_device, whole_ops
from day0.steps.analyze.result import AnalyzeResult

__all__ = ["analyze_model", "capture_at", "run"]


def analyze_model(
    model: ModelSpec, platform: PlatformSpec, compute_dtype: str = "bf16", progress: Progress | None = None
) -> AnalyzeResult:
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    say(f"resolving {model.source}")
    resolved = resolve_model(model)
    hf_config = load_hf_config(resolved)
    compute_dtype, _fp8_note = host_compute_dtype(compute_dtype)  # the capture's dtype: what fp8 keeps
    say("building the architecture on the meta device")
    meta = build_meta_model(hf_config, model.source, compute_dtype, trust_remote_code=resolved.trust_remote_code)
    structure = analyze_structure(meta, model.source)
    say("checking the release's files (tokenizer, shard headers)")
    release = check_release(resolved, meta, online=not hub_offline(HubSettings()))
    library = None if platform.operator_library == "probe" else resolve_library(platform.operator_library)
    say("capturing operators (forward + backward)")
    # the device runs whole the decomposable ops its backend overrides: capture them whole
    keep_whole = whole_ops(platform.device_type) if library is None else library.whole_ops
    inventory = capture_operators(meta, structure.attention_kind, compute_dtype, keep_whole=keep_whole)
    say(f"diffing against {platform.name}'s operator library")
    if library is None:
        coverage = probe_device(inventory, platform.device_type, platform.name)
    else:
        coverage = diff_library(inventory, library, platform.name)
    return AnalyzeResult(
        model=resolved,
        structure=structure,
        inventory=inventory,
        coverage=coverage,
        seconds=time.perf_counter() - start,
        release=release,
    )


_PRODUCTION_EXAMPLES = 16
"""Distinct call shapes kept per op at a production shape: every GEMM of a layer and the LM head's."""


def capture_at(
    model: ResolvedModel, compute_dtype: str, batch: int, seq_len: int, keep_whole: Collection[str] = ()
) -> OpInventory:
    """The capture of `analyze_model` at `batch` x `seq_len` tokens (on meta tensors, so any shape is
    cheap): the calls step 2 checks at a production shape."""
    meta = build_meta_model(
        load_hf_config(model), model.source, compute_dtype, trust_remote_code=model.trust_remote_code
    )
    structure = analyze_structure(meta, model.source)
    return capture_operators(
        meta,
        structure.attention_kind,
        compute_dtype,
        seq_len=seq_len,
        batch=batch,
        keep_whole=keep_whole,
        max_examples=_PRODUCTION_EXAMPLES,
    )


def run(ctx: RunContext, progress: Progress) -> AnalyzeResult:
    spec = ctx.spec
    return analyze_model(spec.model, spec.platform, spec.training.precision.compute, progress=progress)
