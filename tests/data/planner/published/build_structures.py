"""Rebuild the GPT, MPT, Llama 2 7B, Llama 3 70B and DeepSeek-V2-Lite structures of the published table
with step 1's analyser.

    .venv/bin/python tests/data/planner/published/build_structures.py          # structures and configs

Megatron's GPT models (Narayanan et al. 2021 table 1; Korthikanti et al. 2022 table 3) are written as
transformers Starcoder2 configs: pre-LayerNorm, multi-head attention with biases, a non-gated GeLU MLP
of 4h, vocabulary 51200, tied embeddings. Starcoder2 uses rotary positions where Megatron learned
2048 x h position embeddings (under 0.01% of the parameters); nothing else differs.

Llama 3 70B (Llama 3.1 70B has the same shapes) is written from torchtitan's model arguments
(pytorch/torchtitan torchtitan/models/llama/__init__.py, "70B": dim 8192, n_layers 80, n_heads 64,
n_kv_heads 8, ffn_dim_multiplier 1.3, multiple_of 4096, rope_theta 500000) with its FeedForward sizing
(model.py: int(2·4·dim/3), times the multiplier, rounded up to multiple_of: 28672) and the Llama 3
tokenizer's 128256 tokens (the vocabulary of configs/models/llama-3-8b), untied output head.

Llama 2 7B is written from NVIDIA NeMo's Llama2Config7B (NVIDIA/NeMo nemo/collections/llm/gpt/model/llama.py @
19fadb67: 32 layers, hidden 4096, 32 heads and 32 query groups, FFN 11008, gated SiLU, RMSNorm, RoPE, no biases,
seq_length 4096, untied output) and the Llama 2 vocabulary NeMo counts (nemo/collections/common/parts/
perf_metrics_utils.py LLM_VOCAB_SIZE_MAP "llama2": 32000).

DeepSeek-V2-Lite is written from the architecture arguments of the MindSpeed-LLM script its published run
used (Ascend/MindSpeed-LLM examples/mcore/deepseek2_lite/pretrain_deepseek2_lite_16b_ptd_8p.sh @ 1ea39226:
27 layers, hidden 2048, 16 heads, MLA with kv_lora_rank 512 and no q LoRA, qk 128 + 64 rope, v 128, first
layer dense at 10944, 64 routed experts of 1408 with top-6 and 2 shared, vocabulary 102400, untied head).

MosaicML's MPT models of LLM Foundry's throughput table are written like the GPTs, with the shapes of their
pretraining yamls (mosaicml/llm-foundry scripts/train/yamls/pretrain/mpt-{7b,13b,30b}.yaml: d_model, n_heads,
n_layers, expansion_ratio 4, vocab_size 50368). The benchmark table's NumParams column fixes the rest: it equals
12·d²+13·d per layer (biased linears and LayerNorms) plus 50368·d tied embeddings, a final LayerNorm and
max_seq_len·d learned positions for all three (MPT-7B at seq 2048: 6,658,859,008), so the benchmarked MPTs
carry biases, as the Starcoder2 config writes them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).parent
GPT = {  # name: (attention heads, hidden, layers)
    "gpt-22b": (64, 6144, 48),
    "gpt-39b": (64, 8192, 48),
    "gpt-76b": (80, 10240, 60),
    "gpt-146b": (96, 12288, 80),
    "gpt-175b": (96, 12288, 96),
    "gpt-310b": (128, 16384, 96),
    "gpt-530b": (128, 20480, 105),
    "gpt-1t": (160, 25600, 128),
}

MPT = {  # name: (attention heads, hidden, layers), vocabulary 50368
    "mpt-7b": (32, 4096, 32),
    "mpt-13b": (40, 5120, 40),
    "mpt-30b": (56, 7168, 48),
}

LLAMA = {  # name: torchtitan ModelArgs (dim, n_layers, n_heads, n_kv_heads, ffn_dim_multiplier, multiple_of)
    "llama-3-70b": (8192, 80, 64, 8, 1.3, 4096),
}

LLAMA2 = {  # name: transformers LlamaConfig fields
    "llama-2-7b": dict(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    ),
}


DEEPSEEK_V2 = {  # name: the MindSpeed-LLM script's architecture arguments, as transformers' DeepseekV2Config fields
    "deepseek-v2-lite": dict(
        vocab_size=102400,
        hidden_size=2048,
        intermediate_size=10944,
        moe_intermediate_size=1408,
        num_hidden_layers=27,
        num_attention_heads=16,
        num_key_value_heads=16,
        n_shared_experts=2,
        n_routed_experts=64,
        num_experts_per_tok=6,
        first_k_dense_replace=1,
        kv_lora_rank=512,
        q_lora_rank=None,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        max_position_embeddings=163840,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    ),
}


def llama_ffn(dim: int, multiplier: float, multiple_of: int) -> int:
    """torchtitan's FeedForward hidden size for a model dimension."""
    return multiple_of * math.ceil(int(multiplier * int(2 * 4 * dim / 3)) / multiple_of)


def config(name: str):
    """The transformers config of one model of the table (written beside its structure as
    `<name>/config.json`, the model source a `day0 plan` spec names)."""
    from transformers import DeepseekV2Config, LlamaConfig, Starcoder2Config

    if name in DEEPSEEK_V2:
        return DeepseekV2Config(**DEEPSEEK_V2[name])
    if name in LLAMA2:
        return LlamaConfig(**LLAMA2[name])
    if name in LLAMA:
        dim, layers, heads, kv_heads, multiplier, multiple_of = LLAMA[name]
        return LlamaConfig(
            vocab_size=128256,
            hidden_size=dim,
            intermediate_size=llama_ffn(dim, multiplier, multiple_of),
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            max_position_embeddings=8192,
            rope_theta=500000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            bos_token_id=128000,
            eos_token_id=128001,
        )

    heads, hidden, layers = GPT[name] if name in GPT else MPT[name]
    return Starcoder2Config(
        vocab_size=51200 if name in GPT else 50368,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        hidden_act="gelu_pytorch_tanh",
        max_position_embeddings=2048,
        use_bias=True,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
    )


def structure(name: str):
    """Step 1's structure of one GPT of the table."""
    from day0.model.build import build_meta_model
    from day0.model.structure import analyze_structure

    return analyze_structure(build_meta_model(config(name), name), name)


def write_config(name: str) -> None:
    (HERE / name).mkdir(exist_ok=True)
    (HERE / name / "config.json").write_text(config(name).to_json_string())


def main() -> None:
    for name in [*GPT, *MPT, *LLAMA, *LLAMA2, *DEEPSEEK_V2]:
        write_config(name)
        s = structure(name)
        (HERE / f"{name}.structure.json").write_text(json.dumps(s.model_dump(), indent=1) + "\n")
        print(name, s.params_total / 1e9)


if __name__ == "__main__":
    main()
