"""Plausibility bounds on a model's config.json, checked before anything builds from it.

Contract: `check_config(source, config)` raises `ModelError` naming the field, the bound and the
value, so a config with 10^9 layers, zero experts or top-k above the expert count is refused in
microseconds instead of building forever or crashing inside transformers. The bounds are generous
(several times the largest published model) and only catch nonsense. The shapes must also fit
together as every attention implementation needs: heads split the hidden size evenly (unless the
config gives `head_dim`, or uses MLA's own widths), K/V heads split the attention heads evenly; a
dtype is one torch has; `rope_scaling`/`rope_parameters`/`text_config` are mappings when present.
Group-limited routing (`n_group`, `topk_group`) splits the experts into equal groups and picks among
them, and a DeepSeek-style MLA config's `head_dim` is its rotary width, `qk_rope_head_dim`: both
crashed inside transformers' forward otherwise (a reshape, a top-k, a broadcast).
"""

from __future__ import annotations

from day0.core.typing import HFConfigDict
from day0.errors import ModelError, shorten

__all__ = ["BOUNDS", "DTYPE_NAMES", "EXPERT_KEYS", "MAPPING_KEYS", "TOP_K_KEYS", "check_config"]

# field -> (least, most). Largest published figures for scale: 126 layers (Llama 3.1 405B),
# hidden 16384, 384 routed experts (Kimi K2), vocabularies around 256k.
BOUNDS: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 1024),
    "hidden_size": (1, 131_072),
    "intermediate_size": (1, 1_048_576),
    "moe_intermediate_size": (1, 1_048_576),
    "num_attention_heads": (1, 4096),
    "num_key_value_heads": (1, 4096),
    "vocab_size": (1, 10_000_000),
    "max_position_embeddings": (1, 100_000_000),
}
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
TOP_K_KEYS = ("num_experts_per_tok", "moe_topk")
_MOST_EXPERTS = 65_536
# What config.json's `torch_dtype` / `dtype` may name: torch's floating dtypes (transformers reads
# the name as `getattr(torch, name)`), and "auto".
DTYPE_NAMES = frozenset(
    {"auto", "float32", "float", "float16", "half", "bfloat16", "float64", "double", "float8_e4m3fn", "float8_e5m2"}
)
MAPPING_KEYS = ("rope_scaling", "rope_parameters", "text_config", "quantization_config")


def _integer(source: str, key: str, value: object, least: int, most: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
        raise ModelError(source, key, f"expected an integer from {least} to {most}, got {shorten(value, 40)}")
    return value


def check_config(source: str, config: HFConfigDict) -> None:
    """Refuse implausible sizes in `config` (see the module contract); absent or null fields pass."""
    for key, (least, most) in BOUNDS.items():
        if config.get(key) is not None:
            _integer(source, key, config[key], least, most)
    experts = next(((k, config[k]) for k in EXPERT_KEYS if config.get(k) is not None), None)
    if experts is not None:
        _integer(source, experts[0], experts[1], 1, _MOST_EXPERTS)
    for key in TOP_K_KEYS:
        if config.get(key) is None:
            continue
        most = experts[1] if experts is not None else _MOST_EXPERTS
        if experts is not None and isinstance(config[key], int) and config[key] > most:
            raise ModelError(source, key, f"top-k {config[key]} is above the {most} experts ({experts[0]})")
        _integer(source, key, config[key], 1, most)
    _check_shapes(source, config)
    if experts is not None:
        _check_groups(source, config, experts)
    for key in ("torch_dtype", "dtype"):
        value = config.get(key)
        if value is not None and (not isinstance(value, str) or value not in DTYPE_NAMES):
            raise ModelError(source, key, f"expected one of {sorted(DTYPE_NAMES)}, got {shorten(value, 40)}")
    for key in MAPPING_KEYS:
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise ModelError(source, key, f"expected a mapping or null, got {shorten(config[key], 40)}")
    if isinstance(config.get("text_config"), dict):
        check_config(source, config["text_config"])


def _check_shapes(source: str, config: HFConfigDict) -> None:
    """Heads split the hidden size, K/V heads the heads (bounds already checked: ints or absent)."""
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    kv = config.get("num_key_value_heads")
    own_widths = config.get("head_dim") is not None or config.get("kv_lora_rank") is not None
    if isinstance(hidden, int) and isinstance(heads, int) and not own_widths and hidden % heads:
        raise ModelError(
            source,
            "num_attention_heads",
            f"{heads} heads do not split hidden_size {hidden} evenly (and the config gives no head_dim)",
        )
    if isinstance(heads, int) and isinstance(kv, int) and heads % kv:
        raise ModelError(source, "num_key_value_heads", f"{kv} K/V heads do not split the {heads} attention heads")
    head_dim, rope = config.get("head_dim"), config.get("qk_rope_head_dim")
    if config.get("model_type") in _ROPE_WIDTH_IS_HEAD_DIM and head_dim is not None and head_dim != rope:
        raise ModelError(
            source,
            "head_dim",
            f"{shorten(head_dim, 40)} differs from qk_rope_head_dim {shorten(rope, 40)}: "
            f"{config['model_type']} rotates keys and queries over head_dim (drop head_dim or make them equal)",
        )


# MLA architectures whose transformers config sets head_dim = qk_rope_head_dim (Mistral 4's is the whole
# query width instead, so it is not here).
_ROPE_WIDTH_IS_HEAD_DIM = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_linear"})
# Routers that sum each group's two best scores (DeepSeek-V3's noaux_tc): a group needs two experts.
_TOP_TWO_PER_GROUP = frozenset({"deepseek_v3", "deepseek_v32"})


def _check_groups(source: str, config: HFConfigDict, experts: tuple[str, int]) -> None:
    """`n_group` splits the experts evenly and `topk_group` picks at most all groups (bounds checked)."""
    key, count = experts
    if config.get("n_group") is None:
        return
    groups = _integer(source, "n_group", config["n_group"], 1, count)
    if count % groups:
        raise ModelError(source, "n_group", f"{groups} groups do not split the {count} experts ({key}) evenly")
    if config.get("model_type") in _TOP_TWO_PER_GROUP and count // groups < 2:
        raise ModelError(
            source,
            "n_group",
            f"{groups} groups of the {count} experts ({key}) hold {count // groups} each; "
            f"{config['model_type']}'s router scores a group by its two best experts, so each needs at least 2",
        )
    if config.get("topk_group") is not None:
        _integer(source, "topk_group", config["topk_group"], 1, groups)
