"""Parameter counts against published totals, MoE-aware active counts, layer kinds, KV cache."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import yaml
from transformers import GptOssConfig, Qwen3NextConfig

from day0.model.build import build_meta_model, load_hf_config
from day0.model.source import resolve_model_source
from day0.model.structure import ModelStructure, analyze_structure
from tests.fixtures.paths import DATA

PUBLISHED = yaml.safe_load((DATA / "published_params.yaml").read_text())


@cache
def structure(name: str) -> ModelStructure:
    return analyze_structure(build_meta_model(load_hf_config(resolve_model_source(name)), name), name)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_totals_match_published(name: str) -> None:
    s, ref = structure(name), PUBLISHED[name]
    assert s.params_total / 1e9 == pytest.approx(ref["total"], rel=0.005)
    assert s.params_active / 1e9 == pytest.approx(ref["active"], rel=ref["active_tolerance"])


def test_deepseek_v3_structure() -> None:
    s = structure("deepseek-v3")
    assert s.attention_kind == "MLA" and s.mla.kv_lora_rank == 512
    kinds = {k.name: k for k in s.layer_kinds}
    assert kinds["mla+dense"].indices == [0, 1, 2] and kinds["mla+moe"].count == 58
    assert s.moe.num_experts == 256 and s.moe.top_k == 8 and s.moe.num_shared_experts == 1
    # Active routed experts are exactly top_k / num_experts of the routed total.
    routed = s.components["routed_experts"]
    assert routed.active == pytest.approx(routed.total * 8 / 256, rel=1e-9)
    # Everything that is not a routed expert counts fully.
    for name, comp in s.components.items():
        if name != "routed_experts":
            assert comp.active == comp.total
    # MLA caches the latent plus the rope key: 61 layers x (512 + 64) x 2 bytes.
    assert s.kv_cache_bytes_per_token["bf16"] == 61 * (512 + 64) * 2
    assert any("multi-token-prediction" in n for n in s.notes)


@pytest.mark.parametrize(
    "name, kind, kv_bytes_bf16",
    [
        ("llama-3-8b", "GQA", 2 * 32 * 8 * 128 * 2),
        ("mixtral-8x7b", "GQA", 2 * 32 * 8 * 128 * 2),
        ("qwen3-30b-a3b", "GQA", 2 * 48 * 4 * 128 * 2),
    ],
)
def test_attention_kind_and_kv_cache(name: str, kind: str, kv_bytes_bf16: int) -> None:
    s = structure(name)
    assert s.attention_kind == kind
    assert s.kv_cache_bytes_per_token["bf16"] == kv_bytes_bf16
    assert s.kv_cache_bytes_per_token["fp8"] * 2 == kv_bytes_bf16


def test_a_hybrid_models_kv_cache_counts_its_attention_layers_only() -> None:
    """A small Qwen3-Next (2 of 8 layers full attention, the rest Gated DeltaNet): step 1's KV figure is the
    attention layers' (it was all eight's), and a note says what the others keep."""
    config = Qwen3NextConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, vocab_size=256,
    )  # fmt: skip
    s = analyze_structure(build_meta_model(config, "tiny-qwen3-next"), "tiny-qwen3-next")
    assert s.kv_cache_bytes_per_token["bf16"] == 2 * 2 * 16 * 2 * 2  # K and V, 2 heads of 16, 2 layers
    assert any("2 attention layers" in n and "other 6" in n for n in s.notes), s.notes


def test_a_sliding_window_models_kv_cache_counts_its_full_layers_per_token() -> None:
    """A small GPT-OSS (4 layers alternating 128-token sliding window and full attention): the per-token
    figure is the full layers', and a note gives the window the others keep."""
    config = GptOssConfig(
        hidden_size=64, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, num_local_experts=4, num_experts_per_tok=2, vocab_size=256,
    )  # fmt: skip
    s = analyze_structure(build_meta_model(config, "tiny-gpt-oss"), "tiny-gpt-oss")
    assert s.kv_cache_bytes_per_token["bf16"] == 2 * 2 * 16 * 2 * 2  # K and V, 2 heads of 16, 2 full layers
    assert any("2 sliding-window or chunked layers keep at most the last 128" in n for n in s.notes), s.notes


def test_dense_model_has_no_moe_and_layer_params_add_up() -> None:
    s = structure("llama-3-8b")
    assert s.moe is None and [k.name for k in s.layer_kinds] == ["gqa+dense"]
    per_layer = s.layer_kinds[0].params_total
    outside = s.components["embeddings"].total + s.components["head"].total + s.hidden_size  # final norm
    assert per_layer * 32 + outside == s.params_total


@pytest.mark.parametrize(
    "path",
    sorted((DATA / "planner").glob("*.structure.json")),
    ids=lambda p: p.name.removesuffix(".structure.json"),
)
def test_planner_fixtures_are_what_step_1_computes(path: Path) -> None:
    """The planner tests read cached step-1 structures; they must not drift from step 1."""
    fixture = ModelStructure.model_validate_json(path.read_text())
    name = path.name.removesuffix(".structure.json")
    assert fixture.model_dump(exclude={"notes"}) == structure(name).model_dump(exclude={"notes"})
