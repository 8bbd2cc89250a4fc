"""Model scaling rules and the seeded build."""

from __future__ import annotations

import pytest
import torch

from day0.errors import ModelError
from day0.model.source import resolve_model_source
from day0.steps.trial.config import TrialScale
from day0.steps.trial.model import build_trial_model, count_parameters, scale_config

SMALL = TrialScale(layers=2, hidden=64, experts=4)


def test_deepseek_v3_scaled_consistently() -> None:
    cfg = scale_config(resolve_model_source("tiny-deepseek-v3").config, SMALL, vocab_size=512, seq_len=32)
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["n_routed_experts"], cfg["vocab_size"]) == (2, 64, 4, 512)
    assert (cfg["intermediate_size"], cfg["moe_intermediate_size"], cfg["q_lora_rank"], cfg["kv_lora_rank"]) == (
        128,
        32,
        32,
        16,
    )  # widths shrink with hidden (x1/4), rounded up to multiples of 8
    assert cfg["first_k_dense_replace"] == 1 and cfg["num_experts_per_tok"] == 2
    assert cfg["num_experts_per_tok"] <= cfg["n_routed_experts"] * cfg["topk_group"] // cfg["n_group"]


def test_gqa_heads_and_groups_stay_valid() -> None:
    llama = {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "vocab_size": 128256,
        "quantization_config": {"quant_method": "fp8"},
    }
    cfg = scale_config(llama, TrialScale(layers=2, hidden=48), vocab_size=512, seq_len=64)
    assert 48 % cfg["num_attention_heads"] == 0 and 48 // cfg["num_attention_heads"] >= 8
    assert cfg["num_attention_heads"] % cfg["num_key_value_heads"] == 0
    assert "quantization_config" not in cfg and cfg["intermediate_size"] == 168
    dsv3 = {
        "model_type": "deepseek_v3",
        "n_routed_experts": 256,
        "n_group": 8,
        "topk_group": 4,
        "num_experts_per_tok": 8,
    }
    cfg = scale_config(dsv3, TrialScale(experts=4), vocab_size=512, seq_len=64)
    assert (cfg["n_group"], cfg["topk_group"], cfg["num_experts_per_tok"]) == (1, 1, 4)


def test_build_is_seeded_and_trains_in_fp32() -> None:
    cfg = scale_config(resolve_model_source("tiny-deepseek-v3").config, SMALL, vocab_size=512, seq_len=32)
    a, b, c = build_trial_model(cfg, seed=0), build_trial_model(cfg, seed=0), build_trial_model(cfg, seed=1)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc) and pa.dtype == torch.float32
    assert 100_000 < count_parameters(a) < 300_000
    # fp32 on CPU: transformers' default grouped_mm experts path runs (torch >= 2.10 has a CPU kernel)
    # and matches the eager per-expert loop.
    x = torch.randint(0, 512, (2, 16))
    eager = build_trial_model(cfg, seed=0, experts_implementation="eager")
    assert torch.allclose(a(input_ids=x).logits, eager(input_ids=x).logits, atol=1e-5)


def test_oversized_trial_is_refused() -> None:
    big = resolve_model_source("tiny-deepseek-v3").config | {
        "hidden_size": 8192,
        "num_hidden_layers": 64,
        "n_routed_experts": 256,
    }
    with pytest.raises(ModelError, match=r"trial.scale"):
        build_trial_model(scale_config(big, TrialScale(), vocab_size=512, seq_len=32), seed=0)
