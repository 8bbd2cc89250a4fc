"""What one token (and one sequence) leaves in an inference cache, from an HF `config.json` dict: the one
home of these formulas, for step 1's structure and step 6's budget.

Bytes per token, over the layers that attend (the cache dtype's bytes times):
- MHA: 2 * n_h * d_h * L;  GQA: 2 * n_kv * d_h * L;  MQA: 2 * d_h * L  (a K and a V vector per KV head);
- MLA: (kv_lora_rank + qk_rope_head_dim) * L: the compressed latent plus the shared rope key
  (DeepSeek-V2, sec. 2.1), which is what an MLA-aware engine caches.

Hybrid models count only their attention layers in L. transformers' `layer_types` names each layer's
kind; "linear_attention" (Gated DeltaNet, Mamba; legacy "mamba"), "conv" and "moe" (NemotronH's
attention-free layers) keep no per-token K/V. Those that do not name them but set
`full_attention_interval` (Qwen3-Next) attend on every interval-th layer. A linear-attention layer keeps a
fixed state per sequence instead: for Gated DeltaNet (Qwen3-Next's `linear_*` fields), the recurrent state
(value heads x key dim x value dim) plus the causal convolution's last kernel-1 inputs over the q, k and v
channels. Sliding-window and chunked layers are counted as full attention: an engine without a hybrid
allocator caches them for the whole context, so the figure is an upper bound for one that does not.

Per accelerator under tensor parallelism, K/V heads (and Gated DeltaNet's heads) are split across the TP
ranks (K/V heads replicated when TP exceeds them); the MLA latent is replicated on every rank (vLLM's MLA
backends do the same).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from day0.core.typing import HFConfigDict

__all__ = ["KVLayout", "kv_bytes_per_token", "kv_layout", "state_bytes_per_sequence"]

AttentionKind = Literal["MHA", "GQA", "MQA", "MLA"]

_NO_TOKEN_CACHE = frozenset({"linear_attention", "mamba", "conv", "moe"})


class KVLayout(BaseModel):
    """What one token leaves in the cache, per attention layer, and what a sequence keeps in the others."""

    kind: AttentionKind
    layers: int = Field(ge=0, description="Layers that cache K/V per token.")
    kv_heads: int = Field(ge=1, description="K/V heads (MLA: the one shared latent).")
    head_dim: int = Field(ge=1, description="Per-head K/V width (MLA: qk_nope + qk_rope).")
    kv_lora_rank: int | None = Field(None, description="MLA latent width.")
    rope_dim: int | None = Field(None, description="MLA decoupled rope key width.")
    linear_layers: int = Field(0, ge=0, description="Layers with no per-token K/V (linear attention, convolution).")
    state_heads: int = Field(0, ge=0, description="Gated DeltaNet value heads (what TP splits).")
    state_values_per_head: int = Field(
        0, ge=0, description="Values one Gated DeltaNet value head keeps per sequence (recurrent + conv state)."
    )


def _attending_layers(cfg: HFConfigDict, layers: int) -> int:
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        return sum(str(t) not in _NO_TOKEN_CACHE for t in types[:layers])
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return layers // interval
    return layers


def _gated_delta_state(cfg: HFConfigDict) -> tuple[int, int]:
    """(value heads, values per value head) of one Gated DeltaNet layer's per-sequence state; (0, 0)
    where the config names no such layer."""
    if not cfg.get("linear_num_value_heads"):
        return 0, 0
    v_heads, k_heads = int(cfg["linear_num_value_heads"]), int(cfg["linear_num_key_heads"])
    k_dim, v_dim = int(cfg["linear_key_head_dim"]), int(cfg["linear_value_head_dim"])
    conv_window = int(cfg.get("linear_conv_kernel_dim") or 4) - 1
    recurrent = k_dim * v_dim  # per value head
    conv_channels = 2 * k_heads * k_dim + v_heads * v_dim  # q, k and v, before the heads split
    return v_heads, recurrent + conv_window * conv_channels // v_heads


def kv_layout(config: HFConfigDict) -> KVLayout:
    """The cache layout of an HF `config.json` dict (multimodal wrappers: its `text_config`)."""
    cfg = config.get("text_config") or config
    total, heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    layers = _attending_layers(cfg, total)
    state_heads, state_values = _gated_delta_state(cfg) if layers < total else (0, 0)
    hybrid = {"linear_layers": total - layers, "state_heads": state_heads, "state_values_per_head": state_values}
    if cfg.get("kv_lora_rank"):
        rope = int(cfg.get("qk_rope_head_dim") or 0)
        return KVLayout(
            kind="MLA",
            layers=layers,
            kv_heads=1,
            head_dim=int(cfg.get("qk_nope_head_dim") or 0) + rope,
            kv_lora_rank=int(cfg["kv_lora_rank"]),
            rope_dim=rope,
            **hybrid,
        )
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    kind: AttentionKind = "MHA" if kv == heads else "MQA" if kv == 1 else "GQA"
    return KVLayout(kind=kind, layers=layers, kv_heads=kv, head_dim=head_dim, **hybrid)


def kv_bytes_per_token(layout: KVLayout, dtype_bytes: float, tensor_parallel: int = 1) -> float:
    """Cache bytes one token takes on one accelerator (see the module docstring)."""
    if layout.kind == "MLA":
        assert layout.kv_lora_rank is not None
        return (layout.kv_lora_rank + (layout.rope_dim or 0)) * layout.layers * dtype_bytes
    heads_per_rank = max(1, math.ceil(layout.kv_heads / tensor_parallel))
    return 2 * heads_per_rank * layout.head_dim * layout.layers * dtype_bytes


def state_bytes_per_sequence(layout: KVLayout, dtype_bytes: float, tensor_parallel: int = 1) -> float:
    """The fixed state one sequence keeps in the linear-attention layers on one accelerator (0 where the
    model has none, or none this module can size)."""
    heads_per_rank = math.ceil(layout.state_heads / tensor_parallel)
    return heads_per_rank * layout.state_values_per_head * layout.linear_layers * dtype_bytes
