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
  modules it has, experts for expert parallelism, layers for recompute); each issue names both fields.
- `check_engine(spec, steps)`: when step 6 is among `steps`, a named `inference.engine` is one day0
  can start (`day0.steps.inference.config.ENGINES`) on the platform's device type; SGLang is refused
  with its reason (`REFUSED_ENGINES`). `auto` is not refused here:
  it picks by platform, and a platform without a serving engine yet (an NPU) is step 6's to report.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from day0.core.typing import HFConfigDict
from day0.errors import SpecError, SpecIssue
from day0.model.release import rope_context
from day0.spec.pipeline import PipelineSpec
from day0.steps.inference.config import ENGINES, REFUSED_ENGINES

__all__ = ["check_context_lengths", "check_engine", "check_parallel"]


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


def check_engine(spec: PipelineSpec, steps: Iterable[str], source: str) -> None:
    """Refuse a serving engine day0 cannot start here, when step 6 is to run."""
    if "inference" not in steps:
        return
    engine, device = spec.inference.engine, spec.platform.device_type
    if engine in REFUSED_ENGINES:
        raise SpecError(source, [SpecIssue("inference.engine", f"{engine!r}: {REFUSED_ENGINES[engine]}")])
    if engine not in ENGINES:
        message = f"{engine!r} is not an engine day0 starts; expected one of {sorted(ENGINES)}"
        raise SpecError(source, [SpecIssue("inference.engine", message)])
    if engine != "auto" and device not in ENGINES[engine]:
        message = f"{engine!r} serves on device types {list(ENGINES[engine])}, not {device!r} (platform.device_type)"
        raise SpecError(source, [SpecIssue("inference.engine", message)])


def check_parallel(spec: PipelineSpec, config: HFConfigDict, source: str) -> None:
    """Refuse pinned knobs that contradict each other, another section or the model (see the contract)."""
    text = config.get("text_config")
    issues = _parallel_issues(spec, text if isinstance(text, dict) else config)
    if issues:
        raise SpecError(source, issues)


def _clash(field: str, value: object, other: str, other_value: object, why: str) -> SpecIssue:
    return SpecIssue(field, f"{_show(value)} contradicts {other}: {_show(other_value)} ({why})")


def _show(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _model_features(config: HFConfigDict) -> tuple[bool, bool, bool, int | None]:
    """(MLA attention, routed experts, dense MLP layers, decoder layers) from a Hugging Face config."""
    experts = next((config[k] for k in ("n_routed_experts", "num_experts", "num_local_experts") if config.get(k)), 0)
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
