"""Model structure from a config alone: the architecture built on the meta device (no memory, no
weights), parameters counted per component, MoE-aware active parameters, layer kinds, KV-cache size.

Contract: `build_meta_model` and `analyze_structure` raise `ModelError` naming the model and the
field for unknown architectures and malformed configs. `ModelStructure` is what later steps (the
planner, the trial scaler) read.
"""

import re
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from day0.core.precision import DTYPE_BYTES
from day0.errors import ModelError
from day0.model.kv_cache import KVLayout, kv_bytes_per_token, kv_layout
from day0.model.plausible import EXPERT_KEYS

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedConfig, PreTrainedModel

__all__ = [
    "COMPONENTS",
    "ComponentParams",
    "LayerKind",
    "MLAConfig",
    "MoEConfig",
    "ModelStructure",
    "analyze_structure",
    "layer_kinds",
]

COMPONENTS = (
    "embeddings",
    "attention",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "norms",
    "head",
    "other",
)


class ComponentParams(BaseModel):
    total: int
    active: int


class LayerKind(BaseModel):
    name: str = Field(description="e.g. 'mla+moe', 'gqa+dense'")
    attention_class: str
    mlp_class: str
    is_moe: bool
    count: int
    indices: list[int]
    params_total: int = Field(description="Parameters of one layer of this kind.")
    params_active: int


class MoEConfig(BaseModel):
    num_experts: int
    top_k: int
    num_shared_experts: int
    expert_intermediate_size: int
    num_moe_layers: int
    num_dense_layers: int


class MLAConfig(BaseModel):
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class ModelStructure(BaseModel):
    model: str
    architecture: str
    model_type: str
    hidden_size: int
    intermediate_size: int | None
    num_layers: int
    layer_kinds: list[LayerKind]
    attention_kind: Literal["MHA", "GQA", "MQA", "MLA"]
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    mla: MLAConfig | None
    moe: MoEConfig | None
    vocab_size: int
    max_context: int | None
    tie_word_embeddings: bool
    params_total: int
    params_active: int
    components: dict[str, ComponentParams]
    kv_cache_bytes_per_token: dict[str, int] = Field(
        description="Per token, over the layers that keep every token (not windowed or linear), by cache dtype."
    )
    notes: list[str] = Field(default=[])

    @property
    def layer_kind_of(self) -> list[str]:
        kinds = [""] * self.num_layers
        for kind in self.layer_kinds:
            for i in kind.indices:
                kinds[i] = kind.name
        return kinds


# --- counting ----------------------------------------------------------------------------------

_COMPONENT_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("embeddings", re.compile(r"embed_tokens|wte|word_embeddings")),
    ("head", re.compile(r"^lm_head\.|\.lm_head\.")),
    ("norms", re.compile(r"norm[^.]*\.(weight|bias)$")),
    ("shared_experts", re.compile(r"\.shared_experts?\.")),
    ("router", re.compile(r"\.(mlp|block_sparse_moe)\.(gate|router)\.|shared_expert_gate")),
    ("routed_experts", re.compile(r"\.experts\.")),
    ("attention", re.compile(r"\.(self_attn|attention|attn)\.")),
    ("dense_mlp", re.compile(r"\.(mlp|feed_forward|ffn)\.")),
]


def _component(name: str) -> str:
    return next((comp for comp, pattern in _COMPONENT_RULES if pattern.search(name)), "other")


def _moe_numbers(cfg: "PreTrainedConfig") -> tuple[int, int, int]:
    num_experts = next((n for k in EXPERT_KEYS if (n := getattr(cfg, k, None))), 0)
    top_k = getattr(cfg, "num_experts_per_tok", None) or getattr(cfg, "moe_topk", None) or 0
    shared = getattr(cfg, "n_shared_experts", None) or (1 if getattr(cfg, "shared_expert_intermediate_size", 0) else 0)
    return int(num_experts), int(top_k), int(shared)


def _decoder_layers(model: "torch.nn.Module") -> "torch.nn.ModuleList":
    import torch  # here, not at import: the planner reads `ModelStructure` without torch

    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise ModelError(type(model).__name__, "architectures", "no decoder layer list (model.layers) found")
    return layers


def _attention_kind(cfg: "PreTrainedConfig") -> Literal["MHA", "GQA", "MQA", "MLA"]:
    if getattr(cfg, "kv_lora_rank", None):
        return "MLA"
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    return "MHA" if kv == heads else "MQA" if kv == 1 else "GQA"


def layer_kinds(model: "PreTrainedModel", attention_kind: str) -> list[tuple[str, bool]]:
    """(kind name, is_moe) per decoder layer; kind = attention kind [+ layer type] + moe/dense."""
    layer_types = getattr(model.config, "layer_types", None)
    kinds = []
    for i, layer in enumerate(_decoder_layers(model)):
        mlp = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe", None)
        is_moe = mlp is not None and hasattr(mlp, "experts")
        attn = attention_kind.lower()
        if layer_types and layer_types[i] != "full_attention":
            attn += f"-{layer_types[i].replace('_attention', '')}"
        kinds.append((f"{attn}+{'moe' if is_moe else 'dense'}", is_moe))
    return kinds


def _kv_cache_bytes(cfg: "PreTrainedConfig") -> tuple[dict[str, int], KVLayout]:
    layout = kv_layout(cfg.to_dict())
    return {dtype: int(kv_bytes_per_token(layout, nbytes)) for dtype, nbytes in DTYPE_BYTES.items()}, layout


def analyze_structure(model: "PreTrainedModel", source: str) -> ModelStructure:
    cfg = model.config
    num_experts, top_k, shared = _moe_numbers(cfg)
    active_share = top_k / num_experts if num_experts else 1.0
    components = {c: ComponentParams(total=0, active=0) for c in COMPONENTS}
    per_layer: dict[int, list[int]] = {}
    layer_re = re.compile(r"\.layers\.(\d+)\.")
    for name, param in model.named_parameters():
        comp, n = _component(name), param.numel()
        active = round(n * active_share) if comp == "routed_experts" else n
        components[comp].total += n
        components[comp].active += active
        if m := layer_re.search(name):
            acc = per_layer.setdefault(int(m.group(1)), [0, 0])
            acc[0] += n
            acc[1] += active
    attention_kind = _attention_kind(cfg)
    kinds: dict[str, LayerKind] = {}
    layers = _decoder_layers(model)
    for i, (kind, is_moe) in enumerate(layer_kinds(model, attention_kind)):
        if kind not in kinds:
            layer = layers[i]
            mlp = getattr(layer, "mlp", None) or getattr(layer, "block_sparse_moe", None)
            kinds[kind] = LayerKind(
                name=kind,
                attention_class=type(getattr(layer, "self_attn", layer)).__name__,
                mlp_class=type(mlp).__name__,
                is_moe=is_moe,
                count=0,
                indices=[],
                params_total=per_layer.get(i, [0, 0])[0],
                params_active=per_layer.get(i, [0, 0])[1],
            )
        kinds[kind].count += 1
        kinds[kind].indices.append(i)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    moe_layers = sum(k.count for k in kinds.values() if k.is_moe)
    notes = []
    if getattr(cfg, "num_nextn_predict_layers", 0):
        notes.append(
            f"{cfg.num_nextn_predict_layers} multi-token-prediction layer(s) in the release are not "
            "instantiated by transformers and are not counted"
        )
    if attention_kind == "MLA":
        notes.append("KV cache counted as MLA's compressed latent (kv_lora_rank + qk_rope_head_dim per layer)")
    kv_bytes, kv = _kv_cache_bytes(cfg)
    if kv.window_layers:
        notes.append(
            f"KV cache per token counted over the {kv.layers} layers that keep every token; the "
            f"{kv.window_layers} sliding-window or chunked layers keep at most the last {kv.window_tokens:,}"
        )
    if kv.linear_layers:
        notes.append(
            f"KV cache counted over the {kv.layers + kv.window_layers} attention layers; the other "
            f"{kv.linear_layers} keep no K/V"
            + (
                f", {kv.state_layers} of them a fixed state per sequence (linear attention, SSM or convolution)"
                if kv.state_layers
                else ""
            )
            + (
                " that is not sized here (no mixer fields this version knows)"
                if kv.state_layers and not kv.state_heads
                else ""
            )
        )
    return ModelStructure(
        model=source,
        architecture=type(model).__name__,
        model_type=cfg.model_type,
        hidden_size=cfg.hidden_size,
        intermediate_size=getattr(cfg, "intermediate_size", None),
        num_layers=cfg.num_hidden_layers,
        layer_kinds=list(kinds.values()),
        attention_kind=attention_kind,
        num_attention_heads=cfg.num_attention_heads,
        num_kv_heads=getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
        head_dim=head_dim,
        mla=MLAConfig(
            q_lora_rank=getattr(cfg, "q_lora_rank", None),
            kv_lora_rank=cfg.kv_lora_rank,
            qk_nope_head_dim=cfg.qk_nope_head_dim,
            qk_rope_head_dim=cfg.qk_rope_head_dim,
            v_head_dim=cfg.v_head_dim,
        )
        if attention_kind == "MLA"
        else None,
        moe=MoEConfig(
            num_experts=num_experts,
            top_k=top_k,
            num_shared_experts=shared,
            expert_intermediate_size=getattr(cfg, "moe_intermediate_size", None) or cfg.intermediate_size,
            num_moe_layers=moe_layers,
            num_dense_layers=cfg.num_hidden_layers - moe_layers,
        )
        if moe_layers
        else None,
        vocab_size=cfg.vocab_size,
        max_context=getattr(cfg, "max_position_embeddings", None),
        tie_word_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
        params_total=sum(c.total for c in components.values()),
        params_active=sum(c.active for c in components.values()),
        components={k: v for k, v in components.items() if v.total},
        kv_cache_bytes_per_token=kv_bytes,
        notes=notes,
    )
