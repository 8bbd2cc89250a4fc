"""The KV-cache budget: how many tokens (and sequences at the target context) fit beside the weights.

Bytes per token, all layers (the cache dtype's bytes times):
- MHA: 2 * n_h * d_h * L;  GQA: 2 * n_kv * d_h * L;  MQA: 2 * d_h * L  (a K and a V vector per KV head);
- MLA: (kv_lora_rank + qk_rope_head_dim) * L: the compressed latent plus the shared rope key
  (DeepSeek-V2, sec. 2.1), which is what an MLA-aware engine caches.

Per accelerator under tensor parallelism, K/V heads are split across the TP ranks (replicated when
TP exceeds them); the MLA latent is replicated on every rank (vLLM's MLA backends do the same).
The budget follows vLLM's: usable = memory x utilisation - weight shard - activation reserve;
blocks = usable // (block_size x bytes per token); max sequences = cached tokens // context.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from day0.core.typing import HFConfigDict

__all__ = [
    "KVBudget",
    "KVLayout",
    "kv_budget",
    "kv_bytes_per_token",
    "kv_layout",
    "serving_tensor_parallel",
]

AttentionKind = Literal["MHA", "GQA", "MQA", "MLA"]


class KVLayout(BaseModel):
    """What one token leaves in the cache, per layer, by attention kind."""

    kind: AttentionKind
    layers: int = Field(ge=1)
    kv_heads: int = Field(ge=1, description="K/V heads (MLA: the one shared latent).")
    head_dim: int = Field(ge=1, description="Per-head K/V width (MLA: qk_nope + qk_rope).")
    kv_lora_rank: int | None = Field(None, description="MLA latent width.")
    rope_dim: int | None = Field(None, description="MLA decoupled rope key width.")


def kv_layout(config: HFConfigDict) -> KVLayout:
    """The cache layout of an HF `config.json` dict (multimodal wrappers: its `text_config`)."""
    cfg = config.get("text_config") or config
    layers, heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
    if cfg.get("kv_lora_rank"):
        rope = int(cfg.get("qk_rope_head_dim") or 0)
        return KVLayout(
            kind="MLA",
            layers=layers,
            kv_heads=1,
            head_dim=int(cfg.get("qk_nope_head_dim") or 0) + rope,
            kv_lora_rank=int(cfg["kv_lora_rank"]),
            rope_dim=rope,
        )
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    kind: AttentionKind = "MHA" if kv == heads else "MQA" if kv == 1 else "GQA"
    return KVLayout(kind=kind, layers=layers, kv_heads=kv, head_dim=head_dim)


def kv_bytes_per_token(layout: KVLayout, dtype_bytes: float, tensor_parallel: int = 1) -> float:
    """Cache bytes one token takes on one accelerator (see the module docstring)."""
    if layout.kind == "MLA":
        assert layout.kv_lora_rank is not None
        return (layout.kv_lora_rank + (layout.rope_dim or 0)) * layout.layers * dtype_bytes
    heads_per_rank = max(1, math.ceil(layout.kv_heads / tensor_parallel))
    return 2 * heads_per_rank * layout.head_dim * layout.layers * dtype_bytes


def serving_tensor_parallel(weight_bytes: float, usable_bytes: float, max_degree: int = 1024) -> int | None:
    """The smallest power-of-two TP whose weight shard takes at most 80% of the usable memory (a rule of
    thumb that leaves a fifth to the cache); None when even `max_degree` is not enough."""
    tp = 1
    while tp <= max_degree:
        if weight_bytes / tp <= 0.8 * usable_bytes:
            return tp
        tp *= 2
    return None


class KVBudget(BaseModel):
    """The cache budget of one accelerator (all figures per accelerator)."""

    label: str = Field(description="What it is for, e.g. 'full model on h100' or 'served trial model'.")
    layout: KVLayout
    cache_dtype_bytes: float
    tensor_parallel: int
    bytes_per_token: float
    memory_bytes: float
    memory_utilization: float
    weight_bytes: float = Field(description="The weight shard on this accelerator.")
    activation_reserve_bytes: float
    cache_bytes: float = Field(description="What is left for the cache (0 when the weights do not fit).")
    block_size: int
    num_blocks: int
    max_tokens: int
    context_len: int
    max_sequences: int = Field(description="Concurrent sequences at the full target context.")


def kv_budget(
    label: str,
    layout: KVLayout,
    *,
    memory_bytes: float,
    weight_bytes: float,
    cache_dtype_bytes: float,
    context_len: int,
    block_size: int,
    tensor_parallel: int = 1,
    memory_utilization: float = 0.9,
    activation_reserve_bytes: float = 0.0,
) -> KVBudget:
    """The budget of one accelerator holding 1/`tensor_parallel` of `weight_bytes`."""
    per_token = kv_bytes_per_token(layout, cache_dtype_bytes, tensor_parallel)
    shard = weight_bytes / tensor_parallel
    cache = max(0.0, memory_bytes * memory_utilization - shard - activation_reserve_bytes)
    blocks = int(cache // (block_size * per_token))
    return KVBudget(
        label=label,
        layout=layout,
        cache_dtype_bytes=cache_dtype_bytes,
        tensor_parallel=tensor_parallel,
        bytes_per_token=per_token,
        memory_bytes=memory_bytes,
        memory_utilization=memory_utilization,
        weight_bytes=shard,
        activation_reserve_bytes=activation_reserve_bytes,
        cache_bytes=cache,
        block_size=block_size,
        num_blocks=blocks,
        max_tokens=blocks * block_size,
        context_len=context_len,
        max_sequences=blocks * block_size // context_len,
    )
