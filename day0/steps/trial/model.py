"""The trial model: the source architecture scaled down (`trial.scale`) and built from a fixed seed.

Scaling rules (one per config key family; everything else is kept, so the trial runs the same
modelling code as the full model):
- `num_hidden_layers` <- scale.layers; dense-first layers (`first_k_dense_replace`) are capped at
  layers - 1 so at least one MoE layer remains.
- `hidden_size` <- scale.hidden; dependent widths (MLP, expert, LoRA ranks) shrink by the same factor,
  rounded up to a multiple of 8; attention heads shrink only when the hidden size no longer divides.
- routed experts (`n_routed_experts` | `num_experts` | `num_local_experts`) <- scale.experts; top-k and
  expert groups are clipped to stay valid.
- `vocab_size` <- the trial tokenizer's; quantisation and remote-code entries are dropped (the trial
  trains in plain dtypes with transformers' built-in architecture).
"""

from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING

import torch

from day0.core.typing import HFConfigDict
from day0.errors import ModelError
from day0.model.plausible import EXPERT_KEYS
from day0.steps.trial.config import TrialScale

if TYPE_CHECKING:
    from transformers import PreTrainedConfig, PreTrainedModel

__all__ = ["MAX_TRIAL_PARAMS", "build_trial_model", "count_parameters", "scale_config"]

_WIDTH_KEYS = (
    "intermediate_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "q_lora_rank",
    "kv_lora_rank",
)
_DROP_KEYS = ("quantization_config", "auto_map", "_name_or_path", "transformers_version", "torch_dtype", "dtype")
MAX_TRIAL_PARAMS = 2_000_000_000  # a trial larger than this is a spec mistake (forgot trial.scale)


def _scale_heads(cfg: HFConfigDict, hidden: int) -> None:
    heads = cfg.get("num_attention_heads")
    if not heads or cfg.get("head_dim") or cfg.get("qk_nope_head_dim"):
        return  # explicit head dims (MLA, or head_dim set) do not depend on hidden_size
    while heads > 1 and (hidden % heads or hidden // heads < 8):
        heads -= 1
    cfg["num_attention_heads"] = heads
    kv = min(cfg.get("num_key_value_heads") or heads, heads)
    while heads % kv:
        kv -= 1
    cfg["num_key_value_heads"] = kv


def _scale_experts(cfg: HFConfigDict, experts: int) -> None:
    key = next((k for k in EXPERT_KEYS if cfg.get(k)), None)
    if key is None:
        return
    cfg[key] = experts
    n_group = cfg.get("n_group")
    if n_group:
        if experts % n_group or experts // n_group < 2:
            cfg["n_group"] = cfg["topk_group"] = 1
        cfg["topk_group"] = min(cfg.get("topk_group") or 1, cfg["n_group"])
    per_tok = cfg.get("num_experts_per_tok")
    if per_tok:
        cap = experts * (cfg.get("topk_group") or 1) // (cfg.get("n_group") or 1)
        cfg["num_experts_per_tok"] = max(1, min(per_tok, cap))


def scale_config(
    config: HFConfigDict, scale: TrialScale, *, vocab_size: int, seq_len: int, eos_token_id: int = 0
) -> HFConfigDict:
    """A copy of the HF `config` dict scaled as `scale` says (see the module docstring)."""
    cfg = {k: v for k, v in copy.deepcopy(config).items() if k not in _DROP_KEYS}
    text = cfg.pop("text_config", None)
    if isinstance(text, dict):  # multimodal wrappers: train the language model
        cfg = {**text, **{k: v for k, v in cfg.items() if k in ("architectures",)}}
    if scale.layers:
        cfg["num_hidden_layers"] = scale.layers
        if cfg.get("first_k_dense_replace") is not None:
            cfg["first_k_dense_replace"] = min(cfg["first_k_dense_replace"], max(scale.layers - 1, 0))
        for key in ("layer_types", "mlp_layer_types"):
            if isinstance(cfg.get(key), list):
                cfg[key] = cfg[key][: scale.layers]
    if scale.hidden and cfg.get("hidden_size"):
        for key in _WIDTH_KEYS:
            if cfg.get(key):
                cfg[key] = scale.scaled_width(cfg[key], cfg["hidden_size"])
        cfg["hidden_size"] = scale.hidden
        _scale_heads(cfg, scale.hidden)
    if scale.experts:
        _scale_experts(cfg, scale.experts)
    cfg["vocab_size"] = vocab_size
    cfg["max_position_embeddings"] = max(cfg.get("max_position_embeddings") or 0, seq_len)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key in cfg and cfg[key] is not None:
            cfg[key] = eos_token_id
    cfg["use_cache"] = False
    return cfg


def _hf_config(config: HFConfigDict) -> PreTrainedConfig:
    from transformers import AutoConfig

    model_type = config.get("model_type")
    try:
        return AutoConfig.for_model(**config)
    except (KeyError, ValueError) as exc:
        raise ModelError(
            str(model_type),
            "model_type",
            f"not a built-in transformers architecture, cannot build the trial model: {exc}",
        ) from None


def build_trial_model(
    config: HFConfigDict, *, seed: int, experts_implementation: str | None = None, device: str | torch.device = "cpu"
) -> PreTrainedModel:
    """The causal LM for `config`, initialised from `seed` in fp32 (master weights)."""
    from transformers import AutoModelForCausalLM

    hf = _hf_config(config)
    with torch.device("meta"):
        n = count_parameters(AutoModelForCausalLM.from_config(hf))
    if n > MAX_TRIAL_PARAMS:
        raise ModelError(
            str(config.get("model_type")),
            "trial.scale",
            f"the trial model would have {n / 1e9:.1f}B parameters (> {MAX_TRIAL_PARAMS / 1e9:.0f}B); "
            "set trial.scale {layers, hidden, experts} to scale it down",
        )
    torch.manual_seed(seed)
    kwargs = {"experts_implementation": experts_implementation} if experts_implementation else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(hf, dtype=torch.float32, **kwargs)
    return model.to(device)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
