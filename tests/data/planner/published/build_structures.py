"""Rebuild the GPT structures of the published-setups table with step 1's own analyser.

    .venv/bin/python tests/data/planner/published/build_structures.py          # structures and configs

Megatron's GPT models (Narayanan et al. 2021 table 1; Korthikanti et al. 2022 table 3) are written as
transformers Starcoder2 configs: pre-LayerNorm, multi-head attention with biases, a non-gated GeLU MLP
of 4h, vocabulary 51200, tied embeddings. Starcoder2 uses rotary positions where Megatron learned
2048 x h position embeddings (under 0.01% of the parameters); nothing else differs.
"""

from __future__ import annotations

import json
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


def config(name: str):
    """The transformers config of one GPT of the table (written beside its structure as
    `<name>/config.json`, the model source a `day0 plan` spec names)."""
    from transformers import Starcoder2Config

    heads, hidden, layers = GPT[name]
    return Starcoder2Config(
        vocab_size=51200,
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
    from day0.core.modeling import build_meta_model
    from day0.core.structure import analyze_structure

    return analyze_structure(build_meta_model(config(name), name), name)


def write_config(name: str) -> None:
    (HERE / name).mkdir(exist_ok=True)
    (HERE / name / "config.json").write_text(config(name).to_json_string())


def main() -> None:
    for name in GPT:
        write_config(name)
        s = structure(name)
        (HERE / f"{name}.structure.json").write_text(json.dumps(s.model_dump(), indent=1) + "\n")
        print(name, s.params_total / 1e9)


if __name__ == "__main__":
    main()
