"""The KV-cache budget formulas for MHA, GQA, MLA and hybrid linear-attention configs, against hand-computed and
published figures."""

from __future__ import annotations

import json

import pytest
from transformers import (
    BambaConfig,
    FalconH1Config,
    GptOssConfig,
    JambaConfig,
    Lfm2Config,
    Llama4TextConfig,
    NemotronHConfig,
    Qwen3NextConfig,
    Zamba2Config,
)

from day0.model.kv_cache import (
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_layout,
    state_bytes_per_sequence,
    window_bytes_per_sequence,
)
from day0.steps.inference.kv_budget import kv_budget, serving_tensor_parallel
from tests.fixtures.paths import REPO


def _config(name: str) -> dict:
    return json.loads((REPO / "configs" / "models" / name / "config.json").read_text())


def test_mha_is_two_vectors_per_head_per_layer() -> None:
    layout = kv_layout({"num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 768})  # GPT-2 small
    assert (layout.kind, layout.kv_heads, layout.head_dim) == ("MHA", 12, 64)
    assert kv_bytes_per_token(layout, 2) == 2 * 12 * 64 * 12 * 2  # 36 KiB at bf16


def test_gqa_counts_kv_heads_and_splits_them_over_tensor_parallel() -> None:
    layout = kv_layout(_config("llama-3-8b"))  # 32 layers, 8 KV heads of 128
    assert layout.kind == "GQA"
    assert kv_bytes_per_token(layout, 2) == 2 * 8 * 128 * 32 * 2 == 131_072  # the published 128 KiB/token
    assert kv_bytes_per_token(layout, 2, tensor_parallel=4) == 131_072 / 4
    assert kv_bytes_per_token(layout, 2, tensor_parallel=16) == 131_072 / 8  # heads replicate past 8 ranks


def test_mla_caches_the_latent_and_rope_key_replicated_over_tensor_parallel() -> None:
    layout = kv_layout(_config("deepseek-v3"))  # 61 layers, kv_lora_rank 512, rope 64
    assert layout.kind == "MLA"
    assert kv_bytes_per_token(layout, 2) == (512 + 64) * 61 * 2 == 70_272  # 68.6 KiB, as step 1 reports
    assert kv_bytes_per_token(layout, 2, tensor_parallel=8) == 70_272


def test_hybrid_linear_attention_caches_kv_in_its_attention_layers_and_a_state_per_sequence() -> None:
    """Qwen3-Next-80B-A3B (transformers' Qwen3NextConfig defaults): 48 layers, every 4th full attention with
    2 KV heads of 256; the other 36 are Gated DeltaNet with 32 value heads of 128, 16 key heads of 128 and a
    width-4 causal convolution."""
    layout = kv_layout(Qwen3NextConfig().to_dict())
    assert (layout.kind, layout.layers, layout.linear_layers) == ("GQA", 12, 36)
    assert kv_bytes_per_token(layout, 2) == 2 * 2 * 256 * 12 * 2 == 24_576  # not 48 layers' 98,304
    recurrent = 32 * 128 * 128  # value heads x key dim x value dim
    conv = 3 * (2 * 16 * 128 + 32 * 128)  # the last 3 inputs of the q, k and v channels
    assert state_bytes_per_sequence(layout, 2) == (recurrent + conv) * 36 * 2 == 39_518_208
    assert state_bytes_per_sequence(layout, 2, tensor_parallel=4) == 39_518_208 / 4
    # A config that names the interval instead of each layer's type gives the same layout.
    named = Qwen3NextConfig().to_dict()
    by_interval = {k: v for k, v in named.items() if k != "layer_types"} | {"full_attention_interval": 4}
    assert kv_layout(by_interval) == layout
    # Models without linear layers keep no state.
    assert state_bytes_per_sequence(kv_layout(_config("llama-3-8b")), 2) == 0


def test_mamba_hybrids_cache_kv_in_their_attention_layers_and_an_ssm_state_per_sequence() -> None:
    """Bamba-9B's layout (transformers' BambaConfig defaults, attention at layers 9, 18 and 27 of 32): 8 KV
    heads of 128; each Mamba-2 layer keeps 128 heads x 64 x a 256-wide SSM state, plus the last 3 inputs
    of the convolution over x, B and C (128 x 64 + 2 x 1 group x 256 channels)."""
    bamba = kv_layout(BambaConfig(attn_layer_indices=[9, 18, 27]).to_dict())
    assert (bamba.layers, bamba.linear_layers, bamba.state_layers) == (3, 29, 29)
    assert kv_bytes_per_token(bamba, 2) == 2 * 8 * 128 * 3 * 2 == 12_288  # not 32 layers' 131,072
    per_layer = 128 * 64 * 256 + 3 * (128 * 64 + 2 * 256)
    assert state_bytes_per_sequence(bamba, 2) == per_layer * 29 * 2 == 123_149_312
    assert state_bytes_per_sequence(bamba, 2, tensor_parallel=2) == 123_149_312 / 2
    # Its head dim left to the model ("auto"): the inner width (2 x 4096) split over the 128 heads, 64.
    assert kv_layout(BambaConfig(attn_layer_indices=[9, 18, 27]).to_dict() | {"mamba_d_head": "auto"}) == bamba
    # NemotronH as transformers saves it (`layers_block_type`, no layer count) and as its checkpoints
    # write it (`hybrid_override_pattern`: M Mamba-2, * attention, E MoE, - MLP): only M keeps a state.
    saved = NemotronHConfig(hybrid_override_pattern="M-M*EM").to_dict()
    assert "num_hidden_layers" not in saved
    written = {k: v for k, v in saved.items() if k != "layers_block_type"}
    written |= {"hybrid_override_pattern": "M-M*EM", "num_hidden_layers": 6}
    nemotron = kv_layout(saved)
    assert nemotron == kv_layout(written)
    assert (nemotron.layers, nemotron.linear_layers, nemotron.state_layers) == (1, 5, 3)
    # 8 groups of a 128-wide state; the SSM state in float32 (its `mamba_ssm_cache_dtype`), the rest in bf16
    ssm, conv = 128 * 64 * 128, 3 * (128 * 64 + 2 * 8 * 128)
    assert state_bytes_per_sequence(nemotron, 2) == (ssm * 4 + conv * 2) * 3
    halved = kv_layout(saved | {"mamba_ssm_cache_dtype": "bfloat16"})
    assert state_bytes_per_sequence(halved, 2) == (ssm + conv) * 2 * 3
    # A NemotronH config.json that names no dtype: float32, as vLLM keeps it.
    unnamed = {k: v for k, v in written.items() if k != "mamba_ssm_cache_dtype"}
    assert kv_layout(unnamed).state_dtype_bytes == 4
    # A value that names no dtype ("auto"): the cache dtype's bytes, as for models that pin none.
    assert kv_layout(saved | {"mamba_ssm_cache_dtype": "auto"}).state_dtype_bytes is None
    # Granite 4.0-H's config.json names its layers "mamba" and "attention".
    granite = kv_layout(_config("llama-3-8b") | {"layer_types": ["mamba", "attention"] * 16}
                        | {k: v for k, v in BambaConfig().to_dict().items() if k.startswith("mamba_")})  # fmt: skip
    assert (granite.layers, granite.state_layers) == (16, 16)
    assert (granite.state_values_per_head, granite.conv_values_per_head, granite.state_dtype_bytes) == (
        64 * 256,
        3 * 68,
        None,  # no pinned dtype: the cache's
    )
    # Jamba's Mamba-1 layers (attention every 8th from the 4th): per inner channel (2 x 4096), a 16-wide
    # state and 3 inputs.
    jamba = kv_layout(JambaConfig().to_dict())
    assert (jamba.layers, jamba.state_layers, jamba.state_heads) == (4, 28, 8192)
    assert state_bytes_per_sequence(jamba, 2) == 8192 * (16 + 3) * 28 * 2
    # Falcon-H1 runs attention and a Mamba-2 mixer side by side in every layer: K/V and a state in each.
    falcon = kv_layout(FalconH1Config().to_dict())
    assert (falcon.layers, falcon.linear_layers, falcon.state_layers) == (32, 0, 32)
    assert state_bytes_per_sequence(falcon, 2) == (8 * 256 + 3 * (128 * 8 + 2 * 256) // 128) * 128 * 32 * 2
    # Zamba2: its hybrid layers add a shared attention block (32 heads of 160) to the Mamba-2 mixer.
    zamba = kv_layout(Zamba2Config().to_dict())
    hybrid = Zamba2Config().to_dict()["layers_block_type"].count("hybrid")
    assert (zamba.layers, zamba.state_layers, zamba.head_dim) == (hybrid, 54, 160)
    # LFM2-1.2B's layout: attention in 6 of 16 layers (8 KV heads of 64); each short-convolution layer keeps
    # the last 2 inputs (conv_L_cache 3) of its 2,048 channels, split over TP as vLLM's short_conv_state_shape.
    lfm2 = kv_layout(Lfm2Config(num_hidden_layers=16, hidden_size=2048, full_attn_idxs=[2, 5, 8, 10, 12, 14]).to_dict())
    assert (lfm2.layers, lfm2.linear_layers, lfm2.state_layers, lfm2.state_heads) == (6, 10, 10, 2048)
    assert kv_bytes_per_token(lfm2, 2) == 2 * 8 * 64 * 6 * 2
    assert state_bytes_per_sequence(lfm2, 2) == 2048 * 2 * 10 * 2 == 81_920
    assert state_bytes_per_sequence(lfm2, 2, tensor_parallel=2) == 81_920 / 2
    # A linear-attention layer whose mixer this module does not know: counted, and its state not sized.
    unknown = kv_layout(_config("llama-3-8b") | {"layer_types": ["linear_attention", "full_attention"] * 16})
    assert (unknown.layers, unknown.state_layers, state_bytes_per_sequence(unknown, 2)) == (16, 16, 0)


def test_windowed_layers_keep_their_window_of_each_sequence() -> None:
    """gpt-oss-120b (transformers' GptOssConfig defaults): 36 layers of 8 KV heads of 64, alternating full
    and 128-token sliding-window attention; Llama 4 (Llama4TextConfig): 12 of 48 layers full, the rest
    attending within chunks of 8,192 tokens."""
    oss = kv_layout(GptOssConfig().to_dict())
    assert (oss.layers, oss.window_layers, oss.window_tokens, oss.linear_layers) == (18, 18, 128, 0)
    assert kv_bytes_per_token(oss, 2) == 2 * 8 * 64 * 18 * 2 == 36_864  # not 36 layers' 73,728
    assert window_bytes_per_sequence(oss, 2, 8192) == 2 * 8 * 64 * 2 * 18 * 128 == 4_718_592
    assert window_bytes_per_sequence(oss, 2, 100) == 2 * 8 * 64 * 2 * 18 * 100  # shorter than the window
    # In whole blocks of 16: 100 tokens take 7 blocks (112 tokens) in every layer that keeps them.
    assert kv_bytes_per_sequence(oss, 2, 100, block_size=16) == 112 * 36_864 + 112 * 2 * 8 * 64 * 2 * 18
    llama4 = kv_layout(Llama4TextConfig().to_dict())
    assert (llama4.layers, llama4.window_layers, llama4.window_tokens) == (12, 36, 8192)
    # A windowed kind whose window the config does not give is counted as keeping every token.
    no_window = GptOssConfig().to_dict() | {"sliding_window": None}
    assert (kv_layout(no_window).layers, kv_layout(no_window).window_layers) == (36, 0)


def test_a_hybrid_budget_counts_each_sequences_state() -> None:
    layout, gib = kv_layout(Qwen3NextConfig().to_dict()), 2**30
    b = kv_budget("qwen3-next", layout, memory_bytes=80 * gib, weight_bytes=40 * gib, cache_dtype_bytes=2,
                  context_len=4000, block_size=16)  # fmt: skip
    cache = 80 * gib * 0.9 - 40 * gib
    assert b.num_blocks == int(cache // (16 * 24_576))
    per_sequence = 4000 * 24_576 + 39_518_208  # 4000 tokens are 250 whole blocks; the state is 29% of it
    assert b.state_bytes_per_sequence == 39_518_208
    assert b.max_sequences == int(cache // per_sequence) == 249  # the K/V alone would hold 349


def test_a_windowed_budget_counts_each_sequences_window() -> None:
    layout, gib = kv_layout(GptOssConfig().to_dict()), 2**30
    b = kv_budget("gpt-oss", layout, memory_bytes=80 * gib, weight_bytes=64 * gib, cache_dtype_bytes=2,
                  context_len=8192, block_size=16)  # fmt: skip
    cache = 80 * gib * 0.9 - 64 * gib
    assert b.window_bytes_per_sequence == 4_718_592 and b.state_bytes_per_sequence == 0
    assert b.max_sequences == int(cache // (8192 * 36_864 + 4_718_592)) == 28  # all 36 layers at 8,192: 14


def test_budget_takes_the_weight_shard_and_counts_blocks_and_sequences() -> None:
    layout = kv_layout(_config("llama-3-8b"))
    gib = 2**30
    b = kv_budget(
        "llama on 80 GiB",
        layout,
        memory_bytes=80 * gib,
        weight_bytes=16 * gib,
        cache_dtype_bytes=2,
        context_len=8192,
        block_size=16,
        memory_utilization=0.9,
        activation_reserve_bytes=2 * gib,
    )
    usable = 80 * gib * 0.9 - 16 * gib - 2 * gib  # 54 GiB
    assert b.cache_bytes == pytest.approx(usable)
    assert b.num_blocks == int(usable // (16 * 131_072))
    assert b.max_tokens == b.num_blocks * 16 == 442_368
    assert b.max_sequences == 442_368 // 8192 == 54
    full = kv_budget("no room", layout, memory_bytes=gib, weight_bytes=16 * gib, cache_dtype_bytes=2,
                     context_len=8192, block_size=16)  # fmt: skip
    assert (full.cache_bytes, full.max_tokens, full.max_sequences) == (0, 0, 0)


def test_serving_tensor_parallel_is_the_smallest_power_of_two_that_fits() -> None:
    assert serving_tensor_parallel(10, 100) == 1
    assert serving_tensor_parallel(1342e9, 72e9) == 32  # DeepSeek-V3 bf16 on 80 GiB x 0.9: 41.9 GB/rank
    assert serving_tensor_parallel(1e15, 1e9, max_degree=64) is None
