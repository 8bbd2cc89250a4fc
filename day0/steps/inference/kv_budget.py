"""The KV-cache budget: how many tokens (and sequences at the target context) fit beside the weights.

What a token and a sequence cost comes from `day0.model.kv_cache` (the layers that keep every token; a
hybrid model's windowed layers keep a window and its linear-attention layers a state per sequence). The
budget follows vLLM's: usable = memory x utilisation - weight shard - activation reserve; blocks = usable //
(block_size x bytes per token); max sequences = usable // what one sequence at the target context keeps,
in whole blocks. A model with no layer keeping every token has no blocks (max tokens 0).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from day0.model.kv_cache import (
    KVLayout,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    state_bytes_per_sequence,
    window_bytes_per_sequence,
)

__all__ = ["KVBudget", "kv_budget", "serving_tensor_parallel"]


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
    window_bytes_per_sequence: float = Field(
        0.0, description="What the sliding-window or chunked layers keep of one sequence at the context."
    )
    state_bytes_per_sequence: float = Field(0.0, description="Linear-attention layers' fixed state per sequence.")
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
    blocks = int(cache // (block_size * per_token)) if per_token else 0
    per_sequence = kv_bytes_per_sequence(layout, cache_dtype_bytes, context_len, tensor_parallel, block_size)
    return KVBudget(
        label=label,
        layout=layout,
        cache_dtype_bytes=cache_dtype_bytes,
        tensor_parallel=tensor_parallel,
        bytes_per_token=per_token,
        window_bytes_per_sequence=window_bytes_per_sequence(
            layout, cache_dtype_bytes, context_len, tensor_parallel, block_size
        ),
        state_bytes_per_sequence=state_bytes_per_sequence(layout, cache_dtype_bytes, tensor_parallel),
        memory_bytes=memory_bytes,
        memory_utilization=memory_utilization,
        weight_bytes=shard,
        activation_reserve_bytes=activation_reserve_bytes,
        cache_bytes=cache,
        block_size=block_size,
        num_blocks=blocks,
        max_tokens=blocks * block_size,
        context_len=context_len,
        max_sequences=int(cache // per_sequence) if per_sequence else 0,
    )
