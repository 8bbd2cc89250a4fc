"""Shared step-6 test inputs: the tiny GQA MoE (tiny-qwen3-moe) and the tiny MLA MoE
(tiny-deepseek-v3) as served models with the trial's tokenizer."""

from __future__ import annotations

from functools import lru_cache

from day0.core.model_source import resolve_model_source
from day0.spec import InferenceSpec, PlatformSpec, TrialScale, load_platform
from day0.steps.inference.model import ServedModel
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


def cpu() -> PlatformSpec:
    return load_platform("cpu")


def quick_inference(**overrides: object) -> InferenceSpec:
    """A short benchmark: 8 requests of 16 tokens per point, concurrency 1 and 4."""
    bench = {"requests": 8, "warmup_requests": 1, "input_len": 24, "output_len": 16, "concurrency": [1, 4]}
    return InferenceSpec.model_validate({"benchmark": bench, **overrides})
