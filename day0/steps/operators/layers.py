"""Whole-model check: forward and backward of a reduced-depth model (same widths, real random
weights) on the platform vs the CPU reference, compared module by module through hooks.

Why per layer: a loss that is off says *that* something is wrong; the first decoder layer whose
outputs (or, if the forward is clean, whose gradients) leave tolerance says *where*, which is what
someone fixing a kernel needs on day 0.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

import torch
from pydantic import BaseModel, Field
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from day0.core.dtypes import DTYPES
from day0.core.typing import DecoderStack
from day0.model.build import load_hf_config
from day0.model.plausible import EXPERT_KEYS
from day0.model.source import ResolvedModel
from day0.model.structure import ModelStructure
from day0.platforms.kernels import MissingKernelError, Platform
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.metrics import ErrorMetrics, Thresholds, compare, verdict
from day0.steps.operators.op_policy import thresholds_for
from day0.steps.operators.opcheck import ReferenceMode
from day0.steps.operators.result import LayerReport, LayerRow

if TYPE_CHECKING:
    from transformers import PreTrainedConfig, PreTrainedModel

__all__ = ["WholeModel", "build_whole_model", "compare_layers", "layer_units", "reduced_params", "slice_to"]


class WholeModel(BaseModel):
    """What the whole-model check builds: step 1's resolved model, keeping these decoder layers, sliced
    (`slice_to`) where they are over the worker's budget."""

    model: ResolvedModel
    keep_layers: list[int] = Field(min_length=1, description="Decoder layer indices, ascending.")
    sliced: dict[str, int] = Field(
        default_factory=dict,
        description="Config fields cut to fit the budget (fewer experts, heads, vocabulary rows), by their new values.",
    )

    @classmethod
    def from_analysis(cls, analyzed: AnalyzeResult, layers: int | None = None) -> WholeModel:
        """The first `layers` decoder layers, or (None) the first layer of each distinct kind
        (dense/MoE, attention types), as step 1's inventory does."""
        return cls(model=analyzed.model, keep_layers=_keep(analyzed.structure, layers))


def _keep(structure: ModelStructure, layers: int | None) -> list[int]:
    if layers is not None:
        return list(range(min(layers, structure.num_layers)))
    return sorted(kind.indices[0] for kind in structure.layer_kinds)


def _config(whole: WholeModel) -> PreTrainedConfig:
    """The config at the depth to build (the last kept layer + 1), with its slice."""
    cfg = load_hf_config(whole.model)
    for field, value in whole.sliced.items():
        setattr(cfg, field, value)
    cfg.num_hidden_layers = whole.keep_layers[-1] + 1
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[: cfg.num_hidden_layers]
    cfg.use_cache = False
    return cfg


def _trim(model: PreTrainedModel, keep: list[int]) -> PreTrainedModel:
    inner: DecoderStack = getattr(model, "model", model)
    if len(keep) != len(inner.layers):
        inner.layers = nn.ModuleList([inner.layers[i] for i in keep])
        for new, layer in enumerate(inner.layers):  # attention modules index their KV cache slot
            if hasattr(getattr(layer, "self_attn", None), "layer_idx"):
                layer.self_attn.layer_idx = new
        model.config.num_hidden_layers = len(keep)
        if getattr(model.config, "layer_types", None):
            model.config.layer_types = [model.config.layer_types[i] for i in keep]
    return model


def reduced_params(whole: WholeModel) -> int:
    """Parameters of the model `build_whole_model` would build, counted on the meta device."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = _trim(
            AutoModelForCausalLM.from_config(_config(whole), trust_remote_code=whole.model.trust_remote_code),
            whole.keep_layers,
        )
    return sum(p.numel() for p in model.parameters())


# What a slice cuts, in this order: each halving keeps every width a kernel sums over (hidden size,
# head dim, an expert's intermediate size) and drops whole experts, heads or vocabulary rows, whose
# kernels are the same calls, repeated. The dense MLP's intermediate size goes last: it is a GEMM's K.
_TOP_K = ("num_experts_per_tok", "moe_topk")
_SLICEABLE = (*EXPERT_KEYS, "vocab_size", "num_attention_heads", "intermediate_size")


def _least(cfg: PreTrainedConfig, field: str) -> int:
    """The smallest value `field` may be cut to and still build the same kinds of kernels."""
    if field in EXPERT_KEYS:  # the router picks top_k experts, from groups of at least 2 (DeepSeek's group scores)
        top_k = max((getattr(cfg, k, None) or 1) for k in _TOP_K)
        return max(top_k + 1, 2 * (getattr(cfg, "n_group", None) or 1), 2)
    if field == "num_attention_heads":  # grouped-query attention keeps whole groups
        return getattr(cfg, "num_key_value_heads", None) or 1
    if field == "vocab_size":
        return 1024
    return 64


def slice_to(whole: WholeModel, max_params: int) -> WholeModel:
    """`whole`, with as few experts, heads, vocabulary rows (then dense intermediate columns) cut as
    fit `max_params`: each is halved in turn while the model is over it and the field above its least
    (`_least`). Unchanged if it fits; possibly still over if nothing more can be cut."""
    cfg = load_hf_config(whole.model)
    sliced = dict(whole.sliced)
    # one name: others alias it
    experts = next((f for f in EXPERT_KEYS if isinstance(getattr(cfg, f, None), int)), None)
    for field in (f for f in _SLICEABLE if f not in EXPERT_KEYS or f == experts):
        while reduced_params(whole.model_copy(update={"sliced": sliced})) > max_params:
            value = sliced.get(field, getattr(cfg, field, None))
            if not isinstance(value, int) or value // 2 < _least(cfg, field):
                break
            half = value // 2
            if field == "num_attention_heads":  # whole key/value groups, and the head width kept
                if getattr(cfg, "head_dim", None) is None:
                    break
                kv = getattr(cfg, "num_key_value_heads", None) or half
                half = max(kv, half - half % kv)
            n_group = getattr(cfg, "n_group", None)
            if field in EXPERT_KEYS and n_group and half % n_group:
                break
            sliced[field] = half
    return whole.model_copy(update={"sliced": sliced})


def build_whole_model(whole: WholeModel, seed: int = 0) -> PreTrainedModel:
    """The model at reduced depth and full width, with seeded random weights in fp32 on the CPU."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(
        _config(whole), dtype=torch.float32, trust_remote_code=whole.model.trust_remote_code
    )
    return _trim(model, whole.keep_layers).eval()


def layer_units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Named units in forward order: embeddings, each decoder layer, final norm, LM head."""
    inner = getattr(model, "model", model)
    units: list[tuple[str, nn.Module]] = []
    for name, child in inner.named_children():
        if isinstance(child, nn.ModuleList):
            units += [(f"{name}.{i}", m) for i, m in enumerate(child)]
        elif any(True for _ in child.parameters()):
            units.append((name, child))
    units += [(n, m) for n, m in model.named_children() if m is not inner and any(True for _ in m.parameters())]
    return units


def _first_tensor(out: object) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return getattr(out, "last_hidden_state", None)


@contextmanager
def _capture(model: nn.Module) -> Iterator[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]]:
    outs: dict[str, torch.Tensor] = {}
    grads: dict[str, torch.Tensor] = {}
    handles = []
    for name, module in layer_units(model):

        def hook(_m: nn.Module, _i: object, out: object, _name: str = name) -> None:
            t = _first_tensor(out)
            if t is None:
                return
            outs[_name] = t.detach().clone()
            if t.requires_grad:
                t.register_hook(lambda g, _n=_name: grads.__setitem__(_n, g.detach().clone()))

        handles.append(module.register_forward_hook(hook))
    try:
        yield outs, grads
    finally:
        for h in handles:
            h.remove()


def _run(model: nn.Module, ids: torch.Tensor, mode: TorchDispatchMode) -> tuple[float, dict, dict, dict]:
    model.zero_grad(set_to_none=True)
    with _capture(model) as (outs, grads), mode:
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
    params = {
        n: torch.cat(
            [p.grad.detach().flatten().double() for p in m.parameters() if p.grad is not None]
            or [torch.zeros(0, dtype=torch.float64)]
        )
        for n, m in layer_units(model)
    }
    return loss.item(), outs, grads, params


def _row(
    module: str,
    phase: Literal["forward", "backward", "param_grad"],
    p: torch.Tensor | None,
    r: torch.Tensor | None,
    t: Thresholds,
    dtype: torch.dtype,
) -> LayerRow | None:
    if p is None or r is None:
        return None
    m: ErrorMetrics = compare(p, r, t, dtype)
    ok, why = verdict(m, t)
    return LayerRow(module=module, phase=phase, metrics=m, passed=ok, reason=why)


def compare_layers(
    model: PreTrainedModel,
    platform: Platform,
    compute_dtype: str = "fp32",
    validation: ValidationSpec | None = None,
    *,
    seed: int = 0,
    batch: int = 2,
    seq_len: int = 32,
    name: str = "model",
) -> LayerReport:
    """Forward+backward of `model` at the reference dtype plainly and at `compute_dtype` under the
    platform, same weights and tokens; every unit's output, output gradient and parameter gradient
    compared. `model` is not modified."""
    validation = validation or ValidationSpec()
    start = time.perf_counter()
    ref_dtype, dtype = DTYPES[validation.reference_dtype], DTYPES[compute_dtype]
    reference = copy.deepcopy(model).to(ref_dtype)  # type: ignore[arg-type]  # transformers wraps .to in functools.wraps: mypy misses the bound self
    candidate = copy.deepcopy(model).to(dtype).to(platform.device)  # type: ignore[arg-type]  # transformers wraps .to in functools.wraps: mypy misses the bound self
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, seq_len), generator=torch.Generator().manual_seed(seed))
    ref_mode = ReferenceMode()
    ref_loss, ref_out, ref_grad, ref_param = _run(reference, ids, ref_mode)
    t = thresholds_for(compute_dtype, validation)
    units = [n for n, _ in layer_units(model)]
    report = LayerReport(
        model=name,
        layers=sum(n.startswith("layers.") for n in units),
        compute_dtype=compute_dtype,
        reference_dtype=validation.reference_dtype,
        seed=seed,
        loss_reference=ref_loss,
        loss_platform=float("nan"),
        rows=[],
        seconds=0.0,
        notes=[
            f"reference ran {op} at fp32 (no {validation.reference_dtype} kernel)" for op in sorted(ref_mode.downcast)
        ],
    )
    try:
        loss, out, grad, param = _run(candidate, ids.to(platform.device), platform.mode())
    except Exception as exc:  # noqa: BLE001 - a kernel that raises is a finding, not a crash
        report.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        report._missing = exc if isinstance(exc, MissingKernelError) else None
        report.seconds = time.perf_counter() - start
        return report
    report.loss_platform = loss
    # a layer is a chain of many rounded ops: judge it on RMS error and cosine, not elementwise
    t = t.model_copy(update={"rms_share": 1.0})
    rows = [_row(n, "forward", out.get(n), ref_out.get(n), t, dtype) for n in units]
    rows += [_row(n, "backward", grad.get(n), ref_grad.get(n), t, dtype) for n in reversed(units)]
    rows += [_row(n, "param_grad", param.get(n), ref_param.get(n), t, dtype) for n in reversed(units)]
    report.rows = [r for r in rows if r is not None]
    bad = next((r for r in report.rows if not r.passed), None)
    if bad is not None:
        report.first_divergent, report.first_divergent_phase = bad.module, bad.phase
    report.seconds = time.perf_counter() - start
    return report
