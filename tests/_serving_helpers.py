"""Shared step-6 test inputs: the tiny GQA MoE (tiny-qwen3-moe), the tiny MLA MoE (tiny-deepseek-v3)
and a tiny hybrid of linear and full attention (Qwen3-Next's layout) as served models with the
trial's tokenizer."""

from __future__ import annotations

from functools import lru_cache

from day0.model.source import resolve_model_source
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import load_platform
from day0.steps.inference.config import InferenceSpec
from day0.steps.inference.model import ServedModel
from day0.steps.trial.config import TrialScale
from day0.steps.trial.data import prepare_data
from day0.steps.trial.model import scale_config


@lru_cache(maxsize=2)
def served(name: str = "tiny-qwen3-moe") -> ServedModel:
    data = prepare_data(None, 512)
    config = scale_config(
        resolve_model_source(name).config, TrialScale(), vocab_size=data.vocab_size, seq_len=128,
        eos_token_id=data.eos_token_id,
    )  # fmt: skip
    return ServedModel(label=f"{name} (untrained)", config=config, tokenizer=str(data.tokenizer_dir))


def hybrid_served() -> ServedModel:
    """A tiny Qwen3-Next: gated-delta-net linear attention beside full attention, a layout
    transformers' continuous batching has no cache allocator for (it exits on start-up)."""
    base = served()
    config = {
        "model_type": "qwen3_next", "vocab_size": base.config["vocab_size"],
        "eos_token_id": base.config["eos_token_id"],
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "max_position_embeddings": 256,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "layer_types": ["linear_attention", "full_attention"], "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16,
        "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    }  # fmt: skip
    return ServedModel(label="tiny-qwen3-next (untrained)", config=config, tokenizer=base.tokenizer)


def cpu() -> PlatformSpec:
    return load_platform("cpu")


def quick_inference(**overrides: object) -> InferenceSpec:
    """A short benchmark: 8 requests of 16 tokens per point, concurrency 1 and 4."""
    bench = {"requests": 8, "warmup_requests": 1, "input_len": 24, "output_len": 16, "concurrency": [1, 4]}
    return InferenceSpec.model_validate({"benchmark": bench, **overrides})
