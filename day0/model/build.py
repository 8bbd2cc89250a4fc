"""Building a model from its config: the transformers config and the architecture on the meta
device (shapes only, no memory). Shared by step 1 (structure, inventory), step 2 (real weights at
reduced depth) and step 5 (the scaled trial model).

Contract: both raise `ModelError` naming the model and the field for unknown architectures,
malformed configs and models without attention layers (Mamba, RWKV: the steps count, plan and serve
attention).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch

from day0.core.dtypes import DTYPES
from day0.core.library_logs import quiet_known_library_logs
from day0.errors import ModelError, shorten
from day0.model.plausible import check_config
from day0.model.source import ResolvedModel

if TYPE_CHECKING:
    from transformers import PreTrainedConfig, PreTrainedModel

__all__ = ["build_meta_model", "load_hf_config"]

quiet_known_library_logs()  # before transformers' modeling code imports torchao

_REQUIRED_POSITIVE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def load_hf_config(model: ResolvedModel, trust_remote_code: bool | None = None) -> PreTrainedConfig:
    """The transformers config of `model`; remote code runs only if `model.trust_remote_code`
    (the resolver's decision) or an explicit `trust_remote_code` says so."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if trust_remote_code is None:
        trust_remote_code = model.trust_remote_code
    cfg = model.config
    if "model_type" not in cfg:
        raise ModelError(model.source, "model_type", "config.json has no model_type")
    for key in _REQUIRED_POSITIVE:
        value = cfg.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelError(model.source, key, f"expected a positive integer, got {shorten(value, 40)}")
    check_config(model.source, cfg)
    try:
        hf_config = AutoConfig.from_pretrained(model.directory, trust_remote_code=trust_remote_code)
    except (ValueError, StrictDataclassError) as exc:  # the latter: transformers' checks of a config's fields
        if "auto_map" in cfg and not trust_remote_code:
            raise ModelError(
                model.source,
                "model_type",
                f"{cfg['model_type']!r} needs the repo's own code; "
                "set model.trust_remote_code and list the org in model.trusted_orgs",
            ) from None
        reason = " ".join(str(exc).split())[:400]
        if cfg["model_type"] in CONFIG_MAPPING_NAMES:  # a known architecture
            raise ModelError(model.source, "config.json", f"transformers refuses this config: {reason}") from None
        raise ModelError(model.source, "model_type", f"unknown architecture {cfg['model_type']!r}: {reason}") from None
    if getattr(hf_config.get_text_config(), "num_attention_heads", None) is None:
        raise ModelError(
            model.source,
            "num_attention_heads",
            f"{cfg['model_type']!r} has no attention layers (a state-space or recurrent model): day0's steps count, "
            "plan and serve attention; hybrids that mix attention with Mamba or linear attention are supported",
        )
    return hf_config


def build_meta_model(
    hf_config: PreTrainedConfig, source: str, dtype: str = "bf16", trust_remote_code: bool = False
) -> PreTrainedModel:
    """The full architecture on the meta device at `dtype`: shapes only, built in about a second."""
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return AutoModelForCausalLM.from_config(hf_config, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code)
    except ValueError as exc:
        raise ModelError(source, "architectures", f"no causal-LM class for {hf_config.model_type!r}: {exc}") from None
    except (TypeError, AttributeError, RuntimeError, ZeroDivisionError) as exc:
        raise ModelError(source, "config.json", f"config does not build a model: {exc}") from None
