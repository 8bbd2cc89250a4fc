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
- "linear_attention" (Gated DeltaNet, Mamba; legacy "mamba"), "conv", "moe" and "mlp" (NemotronH's
  attention-free layers) keep no K/V. A linear-attention layer keeps a fixed state per sequence instead:
  - Gated DeltaNet (Qwen3-Next's `linear_*` fields): the recurrent state (value heads x key dim x value
    dim) plus the causal convolution's last kernel-1 inputs over the q, k and v channels;
  - a Mamba-2 mixer (`mamba_*` fields: Bamba, Granite 4.0-H, NemotronH, Zamba2, Falcon-H1): the SSM state
    (heads x head dim x state size) plus the convolution's last kernel-1 inputs over x, B and C (heads x
    head dim + 2 x groups x state size channels), as transformers' and vLLM's Mamba-2 caches hold them;
  - a Mamba-1 mixer (Jamba): per inner channel (expand x hidden), the SSM state plus kernel-1 inputs;
  - LFM2's short convolution ("conv" layers, `conv_L_cache`): the last kernel-1 inputs of every hidden
    channel, no SSM state (vLLM's `short_conv_state_shape`);
- "hybrid" layers (Zamba2, Falcon-H1) run attention and a Mamba mixer side by side: both K/V and a state.
The state is kept at the cache dtype, except where the config pins the SSM state's (NemotronH's
`mamba_ssm_cache_dtype`; float32 where a NemotronH config names none, as vLLM does); the convolution's
inputs stay at the cache dtype.
Configs that do not list the kinds give them otherwise: NemotronH's `layers_block_type` (as transformers
saves it) or `hybrid_override_pattern` (a character a layer: `*` attention, `M` Mamba-2, `E` MoE, `-` MLP),
Bamba's `attn_layer_indices` and Jamba's `attn_layer_period` / `attn_layer_offset` (attention there, Mamba
elsewhere), Falcon-H1's `mamba_d_ssm` (every layer hybrid), Qwen3-Next's `full_attention_interval`
(attention on every interval-th layer).

Per accelerator under tensor parallelism, K/V heads (and the state's heads or channels) are split across the TP
ranks (K/V heads replicated when TP exceeds them); the MLA latent is replicated on every rank (vLLM's MLA
backends do the same).
"""

import math
from typing import Literal

from pydantic import BaseModel, Field

from day0.core.precision import DTYPE_BYTES
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

_NO_TOKEN_CACHE = frozenset({"linear_attention", "mamba", "conv", "moe", "mlp"})
_STATE = frozenset({"linear_attention", "mamba", "hybrid", "conv"})
_PATTERN_KIND = {"*": "full_attention", "M": "mamba", "E": "moe", "-": "mlp"}  # NemotronH's characters
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
    linear_layers: int = Field(
        0, ge=0, description="Layers with no per-token K/V (linear attention, convolution, MLP or MoE alone)."
    )
    state_layers: int = Field(0, ge=0, description="Linear-attention layers: each keeps a state per sequence.")
    state_heads: int = Field(
        0, ge=0, description="Heads of that state (Gated DeltaNet value heads, Mamba-2 heads, Mamba-1 channels)."
    )
    state_values_per_head: int = Field(0, ge=0, description="Recurrent or SSM state values one such head keeps.")
    conv_values_per_head: int = Field(0, ge=0, description="Convolution inputs one such head keeps.")
    state_dtype_bytes: float | None = Field(
        None, gt=0, description="Bytes of a state value where the config pins its dtype; else the cache dtype's."
    )


def _layer_kinds(cfg: HFConfigDict, total: int) -> list[str] | None:
    """Each layer's kind, as `layer_types` names them, from whichever field the config gives; None when it
    gives none (every layer attends to every token)."""
    types = cfg.get("layer_types") or cfg.get("layers_block_type")  # the latter: NemotronH as transformers saves it
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(types, list) and types:
        return [str(t) for t in types[:total]]
    if isinstance(pattern, str) and pattern:
        return [_PATTERN_KIND.get(c, "full_attention") for c in pattern[:total]]
    if isinstance(indices := cfg.get("attn_layer_indices"), list):
        return ["full_attention" if i in indices else "mamba" for i in range(total)]
    period, offset = cfg.get("attn_layer_period"), cfg.get("attn_layer_offset")
    if isinstance(period, int) and period > 0 and isinstance(offset, int):
        return ["full_attention" if i % period == offset else "mamba" for i in range(total)]
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(total)]
    if cfg.get("mamba_d_ssm"):  # Falcon-H1: attention and Mamba-2 in every layer
        return ["hybrid"] * total
    return None


def _layer_counts(cfg: HFConfigDict, total: int) -> tuple[int, int, int, int]:
    """(layers keeping every token, windowed layers, their window in tokens, layers keeping a state); the
    rest keep no K/V."""
    kinds = _layer_kinds(cfg, total)
    if kinds is None:
        return total, 0, 0, 0
    window = {t: w for t, key in _WINDOW_KEY.items() if isinstance(w := cfg.get(key), int)}
    windowed = [t for t in kinds if t in window]  # a windowed kind whose window the config omits: full
    full = sum(t not in _NO_TOKEN_CACHE for t in kinds) - len(windowed)
    return full, len(windowed), max((window[t] for t in windowed), default=0), sum(t in _STATE for t in kinds)


def _first(cfg: HFConfigDict, *keys: str) -> int | None:
    """The first of `keys` the config sets to a positive int (a family's name for the field)."""
    return next((v for k in keys if isinstance(v := cfg.get(k), int) and v > 0), None)


def _linear_state(cfg: HFConfigDict) -> tuple[int, int, int]:
    """(heads, state values per head, convolution inputs per head) of one linear-attention layer's
    per-sequence state (see the module docstring); zeros where the config names no mixer this module sizes."""
    if cfg.get("linear_num_value_heads"):  # Gated DeltaNet
        v_heads, k_heads = int(cfg["linear_num_value_heads"]), int(cfg["linear_num_key_heads"])
        k_dim, v_dim = int(cfg["linear_key_head_dim"]), int(cfg["linear_value_head_dim"])
        conv_window = int(cfg.get("linear_conv_kernel_dim") or 4) - 1
        conv_channels = 2 * k_heads * k_dim + v_heads * v_dim  # q, k and v, before the heads split
        return v_heads, k_dim * v_dim, conv_window * conv_channels // v_heads
    if kernel := _first(cfg, "conv_L_cache"):  # LFM2: per hidden channel, kernel-1 inputs and no state
        return int(cfg["hidden_size"]), 0, kernel - 1
    d_state = _first(cfg, "mamba_d_state", "ssm_state_size")
    conv_window = (_first(cfg, "mamba_d_conv", "conv_kernel") or 4) - 1
    heads = _first(cfg, "mamba_n_heads", "mamba_num_heads", "n_mamba_heads")
    expand = _first(cfg, "mamba_expand", "expand") or 2
    if heads and d_state:  # Mamba-2; a head dim not given ("auto") splits the inner width over the heads
        head_dim = (
            _first(cfg, "mamba_d_head", "mamba_head_dim", "mamba_headdim") or expand * cfg["hidden_size"] // heads
        )
        groups = _first(cfg, "mamba_n_groups", "n_groups", "mamba_ngroups") or 1
        conv_channels = heads * head_dim + 2 * groups * d_state  # x, B and C
        return heads, head_dim * d_state, conv_window * conv_channels // heads
    if d_state:  # Mamba-1: per inner channel
        return expand * int(cfg["hidden_size"]), d_state, conv_window
    return 0, 0, 0


_TORCH_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}  # config names -> day0's


def kv_layout(config: HFConfigDict) -> KVLayout:
    """The cache layout of an HF `config.json` dict (multimodal wrappers: its `text_config`)."""
    cfg = config.get("text_config") or config
    heads = int(cfg["num_attention_heads"])
    total = int(cfg.get("num_hidden_layers") or len(cfg.get("layers_block_type") or cfg["hybrid_override_pattern"]))
    layers, window_layers, window, state_layers = _layer_counts(cfg, total)
    state_heads, state_values, conv_values = _linear_state(cfg) if state_layers else (0, 0, 0)
    hybrid = {
        "window_layers": window_layers,
        "window_tokens": window,
        "linear_layers": total - layers - window_layers,
        "state_layers": state_layers,
        "state_heads": state_heads,
        "state_values_per_head": state_values,
        "conv_values_per_head": conv_values,
    }
    # vLLM keeps NemotronH's SSM state in the dtype its config names, float32 where it names none
    ssm_dtype = cfg.get("mamba_ssm_cache_dtype") or ("float32" if cfg.get("model_type") == "nemotron_h" else None)
    short = _TORCH_NAMES.get(str(ssm_dtype))
    state_dtype = DTYPE_BYTES[short] if short and state_values else None
    if cfg.get("kv_lora_rank"):
        rope = int(cfg.get("qk_rope_head_dim") or 0)
        return KVLayout(
            kind="MLA",
            layers=layers,
            kv_heads=1,
            head_dim=int(cfg.get("qk_nope_head_dim") or 0) + rope,
            kv_lora_rank=int(cfg["kv_lora_rank"]),
            rope_dim=rope,
            state_dtype_bytes=state_dtype,
            **hybrid,
        )
    kv = int(cfg.get("num_key_value_heads") or heads)
    # Zamba2 names its shared attention block's head width `attention_head_dim`.
    head_dim = int(cfg.get("head_dim") or cfg.get("attention_head_dim") or cfg["hidden_size"] // heads)
    kind: AttentionKind = "MHA" if kv == heads else "MQA" if kv == 1 else "GQA"
    return KVLayout(kind=kind, layers=layers, kv_heads=kv, head_dim=head_dim, state_dtype_bytes=state_dtype, **hybrid)


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
    per_head = layout.state_values_per_head * (layout.state_dtype_bytes or dtype_bytes)
    per_head += layout.conv_values_per_head * dtype_bytes
    return math.ceil(layout.state_heads / tensor_parallel) * per_head * layout.state_layers


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
