"""Checks of a valid spec against what it names: the model's config and the engines day0 can start.
`day0 validate` and `day0 run` make them before anything starts (`cli.preflight`).

Contract: each raises `SpecError` naming the spec field, the value and the bound, or returns None.
Cheap and pure: neither torch, transformers nor the serving code is imported.

- `check_context_lengths(spec, config, source)`: the context lengths the spec writes
  (`training.seq_len`, `trial.seq_len`, `inference.context_len`, the benchmark's longest request)
  are at most the positions the model supports (`day0.model.release.rope_context`): its
  `max_position_embeddings`, or what its `rope_scaling` extends to (YaRN, linear, dynamic: factor x
  original_max_position_embeddings). A length left at its default is not checked: the defaults are
  figures for a large model, not this model's.
- `check_parallel(spec, config, source)`: the knobs `parallel:` pins agree with each other, with the
  sections that state the same thing (`training.micro_batch`, `training.precision.compute`,
  `planner.sequence_parallel`, `planner.dualpipe`, `planner.overlap`, `planner.selective_recompute`,
  `planner.fp8_activation_cache`, each only where the user wrote it) and with the model (recompute
  modules it has, experts for expert parallelism, layers for recompute); a `planner.software` profile
  against a pinned ZeRO stage or overlap it lacks or a written `planner.flash_attention` it does not run (checked
  with `parallel: auto` too); the all-gather MoE dispatcher (written or the profile's) against a pinned EP
  overlap or fp8 dispatch; each issue names both fields.
- `check_steps(spec, steps, source)`: what the steps in `steps` would refuse of the spec as bad input,
  found from the spec alone. The steps make these same checks (`engine_issues`, `dataset_issues`,
  `reference_issues`) when they run, so what `day0 run` would refuse at step 6 after minutes of work,
  `day0 validate` refuses first, with the same message:
  - step 6: the serving engine is one day0 can start (`day0.steps.inference.config.ENGINES`) on the
    platform's device type, `auto` included (no engine serves on an NPU yet); SGLang is refused with
    its reason (`REFUSED_ENGINES`);
  - step 5: a `trial.dataset` or `trial.reference` that is a local path names a readable file
    (store URIs are read when the step runs).
- `check_serving(spec, config, source)`: the engine step 6 is to start loads the model it serves
  (`config` scaled as `trial.scale` says): vLLM's MLA kernels take only some latent widths
  (`VLLM_MLA_CACHE_WIDTHS`, per device type). Step 6 checks the model it actually serves the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlparse

from pydantic import BaseModel

from day0.core.typing import HFConfigDict
from day0.errors import SpecError, SpecIssue
from day0.model.plausible import EXPERT_KEYS
from day0.model.release import rope_context
from day0.spec.pipeline import PipelineSpec
from day0.steps.inference.config import ENGINES, REFUSED_ENGINES, vllm_mla_refusal
from day0.steps.parallel.config import SOFTWARE_PROFILES
from day0.steps.trial.config import CPU_REFERENCE, DEFAULT_DATASET

__all__ = [
    "check_context_lengths",
    "check_parallel",
    "check_serving",
    "check_steps",
    "dataset_issues",
    "engine_issues",
    "reference_issues",
]


def _written(model: BaseModel, field: str) -> bool:
    return field in model.model_fields_set


def _lengths(spec: PipelineSpec) -> list[tuple[str, int]]:
    """(field, tokens) of every context length the spec writes itself."""
    out = []
    if _written(spec.training, "seq_len"):
        out.append(("training.seq_len", spec.training.seq_len))
    if _written(spec.trial, "seq_len"):
        out.append(("trial.seq_len", spec.trial.seq_len))
    if _written(spec.inference, "context_len"):
        out.append(("inference.context_len", spec.inference.context_len))
    bench = spec.inference.benchmark
    if _written(spec.inference, "benchmark") and {"input_len", "output_len"} & bench.model_fields_set:
        out.append(("inference.benchmark (input_len + output_len at range_ratio)", bench.longest_request()))
    return out


def check_context_lengths(spec: PipelineSpec, config: HFConfigDict, source: str) -> None:
    """Refuse a written context length beyond the model's positions (see the module contract)."""
    rope = rope_context(config)
    if rope.supported is None:
        return  # absent or malformed: the model config's own checks (day0.model.plausible) speak for it
    issues = [
        SpecIssue(
            field, f"{tokens:,} tokens is beyond the {rope.supported:,} positions of the model's {rope.describe()}"
        )
        for field, tokens in _lengths(spec)
        if tokens > rope.supported
    ]
    if issues:
        raise SpecError(source, issues)


def check_steps(spec: PipelineSpec, steps: Iterable[str], source: str) -> None:
    """Refuse what the steps in `steps` would refuse of this spec as bad input (see the module contract)."""
    steps = set(steps)
    issues = []
    if "inference" in steps:
        issues += engine_issues(spec.inference.engine, spec.platform.device_type)
    if "trial" in steps:
        issues += dataset_issues(spec.trial.dataset) + reference_issues(spec.trial.reference)
    if issues:
        raise SpecError(source, issues)


def check_serving(spec: PipelineSpec, config: HFConfigDict, source: str) -> None:
    """Refuse an engine that cannot load the model step 6 serves: `config` scaled as `trial.scale` says
    (an MLA latent shrinks with the hidden size), at a width vLLM's MLA kernels lack."""
    if "inference" not in spec.steps or not config.get("kv_lora_rank"):
        return
    rank, hidden = int(config["kv_lora_rank"]), config.get("hidden_size")
    rank = spec.trial.scale.scaled_width(rank, int(hidden)) if hidden else rank
    if issues := engine_issues(spec.inference.engine, spec.platform.device_type, {**config, "kv_lora_rank": rank}):
        raise SpecError(source, issues)


def engine_issues(engine: str, device_type: str, served: HFConfigDict | None = None) -> list[SpecIssue]:
    """Step 6 cannot start `engine` on `device_type`: refused with its reason, unknown, or not on that
    device type; or, given the served model's config, vLLM cannot load its MLA latent width."""
    if engine == "vllm" and served and (refusal := vllm_mla_refusal(device_type, served)):
        return [SpecIssue("inference.engine", f"'vllm': {refusal}; use 'transformers'")]
    if engine in REFUSED_ENGINES:
        return [SpecIssue("inference.engine", f"{engine!r}: {REFUSED_ENGINES[engine]}")]
    if engine not in ENGINES:
        return [
            SpecIssue("inference.engine", f"{engine!r} is not an engine day0 starts; expected one of {sorted(ENGINES)}")
        ]
    if device_type in ENGINES[engine]:
        return []
    if engine == "auto":
        return [SpecIssue("platform.device_type", f"serving on {device_type!r} is not supported yet")]
    message = f"{engine!r} serves on device types {list(ENGINES[engine])}, not {device_type!r} (platform.device_type)"
    return [SpecIssue("inference.engine", message)]


def _local_path(uri: str) -> Path | None:
    """The file a dataset or curve URI names on this host (a path or file://); None for an s3:// object."""
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        return None
    return Path(parsed.path if parsed.scheme == "file" else uri)


def dataset_issues(dataset: str | None) -> list[SpecIssue]:
    """Step 5 cannot read `trial.dataset`: a local path that is not a file."""
    path = None if dataset in (None, DEFAULT_DATASET) else _local_path(dataset)
    if path is None or path.is_file():
        return []
    return [SpecIssue("trial.dataset", f"{dataset!r} is not a readable text file (or s3:// object)")]


def reference_issues(reference: str) -> list[SpecIssue]:
    """Step 5 cannot read `trial.reference`: a local path that is not a file."""
    path = None if reference == CPU_REFERENCE else _local_path(reference)
    if path is None or path.is_file():
        return []
    return [SpecIssue("trial.reference", f"cannot read a curve from {reference!r}: no such file")]


def check_parallel(spec: PipelineSpec, config: HFConfigDict, source: str) -> None:
    """Refuse pinned knobs that contradict each other, another section or the model (see the contract)."""
    text = config.get("text_config")
    issues = _parallel_issues(spec, text if isinstance(text, dict) else config) + _software_issues(spec)
    issues += _dispatcher_issues(spec)
    if issues:
        raise SpecError(source, issues)


def _clash(field: str, value: object, other: str, other_value: object, why: str) -> SpecIssue:
    return SpecIssue(field, f"{_show(value)} contradicts {other}: {_show(other_value)} ({why})")


def _show(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _model_features(config: HFConfigDict) -> tuple[bool, bool, bool, int | None]:
    """(MLA attention, routed experts, dense MLP layers, decoder layers) from a Hugging Face config."""
    experts = next((config[k] for k in EXPERT_KEYS if config.get(k)), 0)
    moe = isinstance(experts, int) and experts > 0
    first_dense = config.get("first_k_dense_replace") or 0
    dense_only = config.get("mlp_only_layers") or []
    step = config.get("decoder_sparse_step") or 1
    dense = not moe or bool(first_dense) or bool(dense_only) or (isinstance(step, int) and step > 1)
    layers = config.get("num_hidden_layers")
    return bool(config.get("kv_lora_rank")), moe, dense, layers if isinstance(layers, int) else None


def _parallel_issues(spec: PipelineSpec, config: HFConfigDict) -> list[SpecIssue]:
    p = spec.parallel
    if p == "auto":
        return []
    issues: list[SpecIssue] = []
    f = "parallel."
    if p.distributed_optimizer and p.zero_stage not in (None, 1):
        issues.append(
            _clash(
                f + "zero_stage",
                p.zero_stage,
                f + "distributed_optimizer",
                True,
                "Megatron's distributed optimizer shards the optimizer states, ZeRO-1; ZeRO-2 and 3 are "
                "Megatron-FSDP or torch FSDP: drop one of the two",
            )
        )
    vpp, pp = p.virtual_pipeline_stages, p.pipeline_parallel
    if vpp and vpp > 1 and pp == 1:
        issues.append(
            _clash(f + "virtual_pipeline_stages", vpp, f + "pipeline_parallel", 1, "virtual stages need PP > 1")
        )
    if p.dualpipe:
        if vpp and vpp > 1:
            issues.append(
                _clash(f + "dualpipe", True, f + "virtual_pipeline_stages", vpp, "DualPipe is its own schedule")
            )
        if pp is not None and (pp == 1 or pp % 2):
            issues.append(_clash(f + "dualpipe", True, f + "pipeline_parallel", pp, "DualPipe needs an even PP"))
    if p.expert_tensor_parallel not in (None, 1) and p.tensor_parallel not in (None, p.expert_tensor_parallel):
        issues.append(
            _clash(
                f + "expert_tensor_parallel",
                p.expert_tensor_parallel,
                f + "tensor_parallel",
                p.tensor_parallel,
                "expert-TP is 1 or the TP degree (torchtitan's and the cost model's layouts)",
            )
        )
    issues += _recompute_issues(spec, config)
    issues += _written_twice(spec)
    moe = _model_features(config)[1]
    for name in ("expert_parallel", "expert_tensor_parallel"):
        value = getattr(p, name)
        if value and value > 1 and not moe:
            issues.append(_clash(f + name, value, "model.source", spec.model.source, "the model has no experts"))
    compute = spec.training.precision.compute
    if p.fp8 is not None and compute != "fp8":
        issues.append(
            _clash(f + "fp8", p.fp8.recipe, "training.precision.compute", compute, "an FP8 recipe needs fp8 compute")
        )
    if p.grad_reduce_dtype == "fp32" and spec.planner.grad_dtype == "bf16":
        why = "bf16 gradient buffers are reduced in bf16 (Megatron's main_grad)"
        issues.append(_clash(f + "grad_reduce_dtype", "fp32", "planner.grad_dtype", "bf16", why))
    return issues


def _software_issues(spec: PipelineSpec) -> list[SpecIssue]:
    """A `planner.software` profile against the knobs pinned beside it: a ZeRO stage, an overlap or the
    DualPipe schedule the software lacks, a written attention kind it does not run, an accelerator or a compute
    dtype it does not train on, a gradient reduction dtype its gradient buffer contradicts."""
    name, p = spec.planner.software, spec.parallel
    if name is None:
        return []
    sw, issues = SOFTWARE_PROFILES[name], []
    device = spec.platform.device_type
    if device not in sw.devices:
        why = f"{sw.framework} runs on {list(sw.devices)} ({sw.sources['devices']})"
        issues.append(_clash("planner.software", name, "platform.device_type", device, why))
    compute = spec.training.precision.compute
    if compute == "fp8" and "fp8" not in sw.gemm_efficiency:
        why = f"{sw.framework} trains in {sorted(sw.gemm_efficiency)}, not fp8 ({sw.sources['gemm_efficiency']})"
        issues.append(_clash("training.precision.compute", compute, "planner.software", name, why))
    # a written planner.grad_dtype wins over the profile's (and is checked against the pin in _parallel_issues)
    bf16_grads = sw.grad_dtype == "bf16" and not _written(spec.planner, "grad_dtype")
    if p != "auto" and p.grad_reduce_dtype == "fp32" and bf16_grads:
        why = f"{sw.framework} keeps gradients in bf16 and reduces them so ({sw.sources['grad_dtype']})"
        issues.append(_clash("parallel.grad_reduce_dtype", "fp32", "planner.software", name, why))
    stage, field = None, ""
    if p != "auto" and p.zero_stage is not None:
        stage, field = p.zero_stage, "zero_stage"
    elif p != "auto" and p.distributed_optimizer:
        stage, field = 1, "distributed_optimizer"
    if p != "auto" and stage is not None and stage not in sw.zero_stages:
        why = f"{sw.framework} has ZeRO stages {list(sw.zero_stages)} ({sw.sources['zero_stages']})"
        issues.append(_clash("parallel." + field, getattr(p, field), "planner.software", name, why))
    for k in ("tp", "ep", "dp"):
        pinned = p != "auto" and getattr(p.overlap, k) is True
        written = _written(spec.planner.overlap, k) and getattr(spec.planner.overlap, k)
        if k not in sw.overlaps and (pinned or written):
            field = f"parallel.overlap.{k}" if pinned else f"planner.overlap.{k}"
            why = f"{sw.framework} has overlaps {list(sw.overlaps)} ({sw.sources['overlaps']})"
            issues.append(_clash(field, True, "planner.software", name, why))
    pinned_dualpipe = p != "auto" and p.dualpipe is True
    if not sw.dualpipe and (pinned_dualpipe or (_written(spec.planner, "dualpipe") and spec.planner.dualpipe)):
        field = "parallel.dualpipe" if pinned_dualpipe else "planner.dualpipe"
        issues.append(_clash(field, True, "planner.software", name, f"{sw.framework}: {sw.sources['dualpipe']}"))
    if _written(spec.planner, "flash_attention") and spec.planner.flash_attention != sw.flash_attention:
        why = f"{sw.framework}: {sw.sources['flash_attention']}"
        issues.append(_clash("planner.flash_attention", spec.planner.flash_attention, "planner.software", name, why))
    return issues


def _dispatcher_issues(spec: PipelineSpec) -> list[SpecIssue]:
    """The all-gather token dispatcher (written, or the `planner.software` profile's) against a pinned EP
    overlap or fp8 dispatch: both are of the all-to-all dispatcher's (Megatron's
    --overlap-moe-expert-parallel-comm needs the alltoall or flex dispatcher; fp8 dispatch is DeepEP's)."""
    p, planner = spec.parallel, spec.planner
    if p == "auto":
        return []
    if _written(planner, "moe_token_dispatcher"):
        dispatcher, field = planner.moe_token_dispatcher, "planner.moe_token_dispatcher"
    elif planner.software is not None:
        dispatcher, field = SOFTWARE_PROFILES[planner.software].moe_token_dispatcher, "planner.software"
    else:
        return []
    if dispatcher != "allgather":
        return []
    shown = dispatcher if field != "planner.software" else planner.software
    why = (
        "the EP overlap and fp8 dispatch are the all-to-all dispatchers': write planner.moe_token_dispatcher alltoall "
        "or flex"
    )
    issues = []
    if p.overlap.ep is True:
        issues.append(_clash("parallel.overlap.ep", True, field, shown, why))
    if p.fp8 is not None and p.fp8.dispatch is True:
        issues.append(_clash("parallel.fp8.dispatch", True, field, shown, why))
    return issues


def _recompute_issues(spec: PipelineSpec, config: HFConfigDict) -> list[SpecIssue]:
    assert spec.parallel != "auto"
    pin, f = spec.parallel.recompute_pin(), "parallel.recompute"
    if pin is None:
        return []
    issues = []
    g = pin.granularity
    if pin.modules is not None and g != "selective":
        issues.append(_clash(f + ".modules", pin.modules, f + ".granularity", g, "modules are selective recompute's"))
    for name in ("method", "num_layers"):
        if getattr(pin, name) is not None and g != "full":
            issues.append(
                _clash(f"{f}.{name}", getattr(pin, name), f + ".granularity", g, f"{name} is full recompute's")
            )
    mla, moe, dense, layers = _model_features(config)
    lacks = {
        "mla_up_proj": (mla, "no MLA attention"),
        "moe_act": (moe, "no routed experts"),
        "mlp_act": (dense, "no dense MLP layers"),
    }
    for module in pin.modules or []:
        has, why = lacks.get(module, (True, ""))
        if not has:
            issues.append(_clash(f + ".modules", module, "model.source", spec.model.source, f"that model has {why}"))
    if pin.num_layers and layers and pin.num_layers > layers:
        issues.append(
            _clash(f + ".num_layers", pin.num_layers, "model.source", spec.model.source, f"it has {layers} layers")
        )
    planner = spec.planner
    written = _written(planner, "selective_recompute")
    if pin.modules is not None and written and sorted(pin.modules) != sorted(planner.selective_recompute):
        other = "planner.selective_recompute"
        issues.append(_clash(f + ".modules", pin.modules, other, planner.selective_recompute, "say it once"))
    return issues


def _written_twice(spec: PipelineSpec) -> list[SpecIssue]:
    """Knobs `parallel:` pins that another section, written by the user, sets differently."""
    assert spec.parallel != "auto"
    p, planner, training = spec.parallel, spec.planner, spec.training
    pairs: list[tuple[str, object, str, object, bool]] = [
        ("micro_batch", p.micro_batch, "training.micro_batch", training.micro_batch, _written(training, "micro_batch")),
        (
            "sequence_parallel",
            p.sequence_parallel,
            "planner.sequence_parallel",
            planner.sequence_parallel,
            _written(planner, "sequence_parallel"),
        ),
        ("dualpipe", p.dualpipe, "planner.dualpipe", planner.dualpipe, _written(planner, "dualpipe")),
        (
            "fp8.activation_cache",
            p.fp8.activation_cache if p.fp8 else None,
            "planner.fp8_activation_cache",
            planner.fp8_activation_cache,
            _written(planner, "fp8_activation_cache"),
        ),
    ]
    pairs += [
        (
            f"overlap.{k}",
            getattr(p.overlap, k),
            f"planner.overlap.{k}",
            getattr(planner.overlap, k),
            _written(planner.overlap, k),
        )
        for k in ("tp", "ep", "dp")
    ]
    return [
        _clash(f"parallel.{name}", value, other, other_value, "say it once")
        for name, value, other, other_value, written in pairs
        if value is not None and written and value != other_value
    ]
