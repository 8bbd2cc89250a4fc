"""What one token (and one sequence) leaves in an inference cache, from an HF `config.json` dict: the one
home of these formulas, for step 1's structure and step 6's budget.

Bytes per token, over the L layers that keep every token (the cache dtype's bytes times):
- MHA: 2 * n_h * d_h * L;  GQA: 2 * n_kv * d_h * L;  MQA: 2 * d_h * L  (a K and a V vector per KV head);
- MLA: (kv_lora_rank + qk_rope_head_dim) * L: the compressed latent plus the shared rope key
  (DeepSeek-V2, sec. 2.1), which is what an MLA-aware engine caches.

L counts the layers that keep every token. transformers' `layer_types` names each layer's kind:
- "sliding_attention" and "chunked_attention" layers (Gemma 3, GPT-OSS, Llama 4) keep at most the last
  `sliding_window` / `attention_chunk_size` tokens, so a sequence costs them a fixed amount beyond that
  context (vLLM's hybrid allocator gives them no more);
- "linear_attention" (Gated DeltaNet, Mamba; legacy "mamba"), "conv" and "moe" (NemotronH's attention-free
  layers) keep no K/V; a linear-attention layer keeps a fixed state per sequence instead: for Gated
  DeltaNet (Qwen3-Next's `linear_*` fields), the recurrent state (value heads x key dim x value dim) plus
  the causal convolution's last kernel-1 inputs over the q, k and v channels.
Configs that do not name the kinds but set `full_attention_interval` (Qwen3-Next) attend on every
interval-th layer.

Per accelerator under tensor parallelism, K/V heads (and Gated DeltaNet's heads) are split across the TP
ranks (K/V heads replicated when TP exceeds them); the MLA latent is replicated on every rank (vLLM's MLA
backends do the same).
"""

import math
from typing import Literal

from pydantic import BaseModel, Field

from day0.core.typing import HFConfigDict

__all__ = [
    "KVLayout",
    "kv_bytes_per_sequence",
    "kv_bytes_per_token",
    "kv_layout",
    "state_bytes_per_sequence",
    "window_bytes_per_sequence",
]

AttentionKind = Literal["MHA", "GQA", "MQA", "MLA"]

_NO_TOKEN_CACHE = frozenset({"linear_attention", "mamba", "conv", "moe"})
_WINDOW_KEY = {"sliding_attention": "sliding_window", "chunked_attention": "attention_chunk_size"}


class KVLayout(BaseModel):
    """What one token leaves in the cache, per attention layer, and what a sequence keeps in the others."""

    kind: AttentionKind
    layers: int = Field(ge=0, description="Layers that cache K/V for every token.")
    kv_heads: int = Field(ge=1, description="K/V heads (MLA: the one shared latent).")
    head_dim: int = Field(ge=1, description="Per-head K/V width (MLA: qk_nope + qk_rope).")
    kv_lora_rank: int | None = Field(None, description="MLA latent width.")
    rope_dim: int | None = Field(None, description="MLA decoupled rope key width.")
    window_layers: int = Field(0, ge=0, description="Layers that cache K/V for the last `window_tokens` only.")
    window_tokens: int = Field(0, ge=0, description="The sliding window or attention chunk those layers keep.")
    linear_layers: int = Field(0, ge=0, description="Layers with no per-token K/V (linear attention, convolution).")
    state_heads: int = Field(0, ge=0, description="Gated DeltaNet value heads (what TP splits).")
    state_values_per_head: int = Field(
        0, ge=0, description="Values one Gated DeltaNet value head keeps per sequence (recurrent + conv state)."
    )


def _layer_counts(cfg: HFConfigDict, total: int) -> tuple[int, int, int]:
    """(layers keeping every token, windowed layers, their window in tokens); the rest keep no K/V."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        kinds = [str(t) for t in types[:total]]
        window = {t: w for t, key in _WINDOW_KEY.items() if isinstance(w := cfg.get(key), int)}
        windowed = [t for t in kinds if t in window]  # a windowed kind whose window the config omits: full
        full = sum(t not in _NO_TOKEN_CACHE for t in kinds) - len(windowed)
        return full, len(windowed), max((window[t] for t in windowed), default=0)
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return total // interval, 0, 0
    return total, 0, 0


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
    layers, window_layers, window = _layer_counts(cfg, total)
    linear = total - layers - window_layers
    state_heads, state_values = _gated_delta_state(cfg) if linear else (0, 0)
    hybrid = {
        "window_layers": window_layers,
        "window_tokens": window,
        "linear_layers": linear,
        "state_heads": state_heads,
        "state_values_per_head": state_values,
    }
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


def _layer_bytes_per_token(layout: KVLayout, dtype_bytes: float, tensor_parallel: int) -> float:
    if layout.kind == "MLA":
        assert layout.kv_lora_rank is not None
        return (layout.kv_lora_rank + (layout.rope_dim or 0)) * dtype_bytes
    return 2 * max(1, math.ceil(layout.kv_heads / tensor_parallel)) * layout.head_dim * dtype_bytes


def kv_bytes_per_token(layout: KVLayout, dtype_bytes: float, tensor_parallel: int = 1) -> float:
    """Cache bytes one token takes on one accelerator in the layers that keep every token (see the module
    docstring)."""
    return _layer_bytes_per_token(layout, dtype_bytes, tensor_parallel) * layout.layers


def window_bytes_per_sequence(
    layout: KVLayout, dtype_bytes: float, context_len: int, tensor_parallel: int = 1, block_size: int = 1
) -> float:
    """What the windowed layers keep of one sequence of `context_len` tokens on one accelerator, in whole
    blocks of `block_size` tokens."""
    tokens = -(-min(context_len, layout.window_tokens) // block_size) * block_size
    return _layer_bytes_per_token(layout, dtype_bytes, tensor_parallel) * layout.window_layers * tokens


def state_bytes_per_sequence(layout: KVLayout, dtype_bytes: float, tensor_parallel: int = 1) -> float:
    """The fixed state one sequence keeps in the linear-attention layers on one accelerator (0 where the
    model has none, or none this module can size)."""
    heads_per_rank = math.ceil(layout.state_heads / tensor_parallel)
    return heads_per_rank * layout.state_values_per_head * layout.linear_layers * dtype_bytes


def kv_bytes_per_sequence(
    layout: KVLayout, dtype_bytes: float, context_len: int, tensor_parallel: int = 1, block_size: int = 1
) -> float:
    """All that one sequence of `context_len` tokens keeps on one accelerator, in whole blocks: every token
    in the full layers, the window in the windowed ones, the linear layers' state."""
    blocks = -(-context_len // block_size)
    return (
        blocks * block_size * kv_bytes_per_token(layout, dtype_bytes, tensor_parallel)
        + window_bytes_per_sequence(layout, dtype_bytes, context_len, tensor_parallel, block_size)
        + state_bytes_per_sequence(layout, dtype_bytes, tensor_parallel)
    )
