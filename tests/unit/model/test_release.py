"""Step 1 reads the release's own files: tiny releases built here (transformers' own sharded save of a
configs/models/tiny-* model, a BPE tokenizer with a chat template, a DeepSeek-V3-style FP8 copy, a
hub-layout cache at a revision) and broken ones, each refused or failed naming the file and tensor."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import torch

from day0.errors import ModelError
from day0.model.build import build_meta_model, load_hf_config
from day0.model.release import ReleaseCheck, check_release, rope_context
from day0.model.source import resolve_model_source
from day0.settings import HubSettings
from day0.spec.pipeline import ModelSpec, load_platform
from day0.steps.analyze.run import analyze_model
from tests.fixtures.model import make_hub_cache
from tests.fixtures.release import (
    FP8_QUANTIZATION,
    TINY_RELEASE_MODEL,
    config_of,
    read_tensors,
    rewrite_header,
    save_model,
    shard_holding,
    write_checkpoint,
)

MODEL = TINY_RELEASE_MODEL
EXPERT = "model.layers.1.mlp.experts.3.down_proj.weight"  # a per-expert tensor, as releases ship them


def check(source: Path | str, settings: HubSettings | None = None) -> ReleaseCheck:
    resolved = resolve_model_source(str(source), settings)
    return check_release(resolved, build_meta_model(load_hf_config(resolved), resolved.source, "bf16"))


def _data_bytes(shard: Path) -> int:
    (length,) = struct.unpack("<Q", shard.read_bytes()[:8])
    return shard.stat().st_size - 8 - length


def test_a_release_saved_by_transformers_checks_clean(tiny_release: Path) -> None:
    result = check(tiny_release)
    assert result.problems == [] and result.not_checked == []
    index = json.loads((tiny_release / "model.safetensors.index.json").read_text())
    w = result.weights
    assert w is not None and w.headers_read
    assert w.tensors == len(index["weight_map"]) and EXPERT in index["weight_map"]
    assert sorted(w.shards) == sorted(set(index["weight_map"].values())) and len(w.shards) > 3
    assert sum(w.bytes_by_dtype.values()) == sum(_data_bytes(tiny_release / s) for s in w.shards)
    assert w.bytes_by_dtype == {"F32": index["metadata"]["total_size"]}
    t = result.tokenizer
    assert t is not None and t.round_trip and t.vocab < config_of(MODEL)["vocab_size"]
    assert t.chat_template == "chat_template.jinja" and t.rendered and "<|user|>What is 2 + 3?" in t.rendered


def test_an_unsharded_release_is_read(tmp_path: Path) -> None:
    single = save_model(tmp_path / "single", MODEL, max_shard_size="1GB")
    assert (single / "model.safetensors").is_file() and not (single / "model.safetensors.index.json").exists()
    result = check(single)
    assert result.problems == [] and result.weights is not None and result.weights.shards == ["model.safetensors"]
    assert sum(result.weights.bytes_by_dtype.values()) == _data_bytes(single / "model.safetensors")


def test_fp8_block_scaled_checkpoint_is_named_with_its_scales(tiny_fp8_release: Path) -> None:
    result = check(tiny_fp8_release)
    assert result.problems == []
    tensors = read_tensors(tiny_fp8_release)
    quantized = [n for n, t in tensors.items() if t.dtype == torch.float8_e4m3fn]
    w = result.weights
    assert w is not None and [(f.scheme, f.dtype, f.scale, f.block) for f in w.fp8] == [
        ("block-scaled", "F8_E4M3", "weight_scale_inv", [128, 128])
    ]
    assert w.fp8[0].tensors == len(quantized) > 0
    assert w.bytes_by_dtype["F8_E4M3"] == sum(tensors[n].numel() for n in quantized)
    assert result.quantization_config == FP8_QUANTIZATION
    assert w.counts == {"missing": 0, "unexpected": 0, "misshaped": 0, "mistyped": 0}


def test_per_tensor_fp8_scales_are_recognised(tiny_fp8_release: Path) -> None:
    tensors = read_tensors(tiny_fp8_release)
    for name in [n for n in tensors if n.endswith("_scale_inv")]:
        tensors[name.removesuffix("_inv")] = tensors.pop(name).amax().reshape(())
    write_checkpoint(tiny_fp8_release, tensors)
    w = check(tiny_fp8_release).weights
    assert w is not None and [(f.scheme, f.scale) for f in w.fp8] == [("per-tensor", "weight_scale")]


def test_a_missing_scale_tensor_is_named(tiny_fp8_release: Path) -> None:
    tensors = read_tensors(tiny_fp8_release)
    del tensors[EXPERT + "_scale_inv"]
    write_checkpoint(tiny_fp8_release, tensors)
    result = check(tiny_fp8_release)
    [problem] = result.problems
    assert EXPERT in problem and shard_holding(tiny_fp8_release, EXPERT).name in problem and "_scale_inv" in problem


def test_a_scale_of_the_wrong_block_shape_is_named(tiny_fp8_release: Path) -> None:
    tensors = read_tensors(tiny_fp8_release)
    scale = EXPERT + "_scale_inv"
    tensors[scale] = torch.ones(tensors[scale].shape[0] + 1, tensors[scale].shape[1])
    write_checkpoint(tiny_fp8_release, tensors)
    [problem] = check(tiny_fp8_release).problems
    assert scale in problem and "128x128 blocks" in problem


def test_fp8_weights_without_quantization_config_fail(tiny_fp8_release: Path) -> None:
    config = json.loads((tiny_fp8_release / "config.json").read_text())
    del config["quantization_config"]
    (tiny_fp8_release / "config.json").write_text(json.dumps(config))
    [problem] = check(tiny_fp8_release).problems
    assert "no quantization_config" in problem and "unscaled" in problem


def test_a_missing_shard_is_named(tiny_release: Path) -> None:
    shard = shard_holding(tiny_release, EXPERT)
    shard.unlink()
    [problem] = check(tiny_release).problems
    assert problem.startswith(shard.name) and "model.safetensors.index.json" in problem


@pytest.mark.parametrize(
    "change, kind",
    [
        (lambda t: t.__setitem__(EXPERT, t[EXPERT][:, :-1]), "wrong shape"),
        (lambda t: t.__setitem__(EXPERT, t[EXPERT].half()), "wrong dtype"),
        (lambda t: t.pop(EXPERT), "missing"),
        (lambda t: t.__setitem__("model.layers.9.extra.weight", torch.zeros(2)), "the model does not have"),
    ],
    ids=["shape", "dtype", "missing", "unexpected"],
)
def test_tensor_mismatches_name_the_tensor_and_file(tiny_release: Path, change: object, kind: str) -> None:
    tensors = read_tensors(tiny_release)
    assert callable(change)
    change(tensors)
    write_checkpoint(tiny_release, tensors)
    [problem] = check(tiny_release).problems
    assert kind in problem
    name = EXPERT if kind != "the model does not have" else "model.layers.9.extra.weight"
    assert name in problem
    if kind != "missing":
        assert shard_holding(tiny_release, name).name in problem


def test_tensors_transformers_ignores_on_load_are_counted_apart(tiny_release: Path) -> None:
    """DeepSeek-V3 ships its multi-token-prediction layer as model.layers.61, which its class ignores;
    older checkpoints carry each layer's rotary inv_freq, which transformers drops too."""
    tensors = read_tensors(tiny_release)
    tensors["model.layers.61.eh_proj.weight"] = torch.zeros(4, 4)
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.zeros(8)
    write_checkpoint(tiny_release, tensors)
    result = check(tiny_release)
    assert result.problems == [] and result.weights is not None and result.weights.ignored == 2


def test_a_tied_head_may_be_left_out(tmp_path: Path) -> None:
    tied = save_model(
        tmp_path / "tied", "tiny-qwen3-moe", config=config_of("tiny-qwen3-moe") | {"tie_word_embeddings": True}
    )
    names = json.loads((tied / "model.safetensors.index.json").read_text())["weight_map"]
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    result = check(tied)
    assert result.problems == [] and result.weights is not None and result.weights.tensors == len(names)


def test_index_and_header_disagreeing_is_named(tiny_release: Path) -> None:
    index = json.loads((tiny_release / "model.safetensors.index.json").read_text())
    shard = index["weight_map"][EXPERT]
    index["weight_map"][EXPERT] = next(f for f in index["weight_map"].values() if f != shard)
    (tiny_release / "model.safetensors.index.json").write_text(json.dumps(index))
    problems = check(tiny_release).problems
    assert len(problems) == 2 and all("disagree" in p and EXPERT in p for p in problems)
    assert {p.split(":")[0] for p in problems} == {shard, index["weight_map"][EXPERT]}


def _truncate(shard: Path) -> None:
    shard.write_bytes(shard.read_bytes()[:-100])


def _not_json(shard: Path) -> None:
    rewrite_header(shard, b"{not json" + b" " * 7)


def _claims_more(shard: Path) -> None:
    raw = shard.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    name = max((n for n in header if n != "__metadata__"), key=lambda n: header[n]["data_offsets"][1])
    header[name]["shape"][0] *= 2
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"][1] = end + (end - begin)
    rewrite_header(shard, json.dumps(header).encode())


@pytest.mark.parametrize(
    "damage, words",
    [
        (_truncate, ["header claims", "more bytes than the file holds"]),
        (_not_json, ["not valid safetensors JSON"]),
        (_claims_more, ["more bytes than the file holds"]),
        (lambda s: s.write_bytes(b"\x01\x02"), ["truncated", "8-byte header length"]),
    ],
    ids=["truncated", "not-json", "claims-more", "empty"],
)
def test_broken_shards_are_refused_naming_the_file(tiny_release: Path, damage: object, words: list[str]) -> None:
    shard = shard_holding(tiny_release, EXPERT)
    assert callable(damage)
    damage(shard)
    with pytest.raises(ModelError) as info:
        check(tiny_release)
    assert info.value.field == shard.name and str(shard) in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_a_tokenizer_that_fails_to_load_is_named(tiny_release: Path) -> None:
    (tiny_release / "tokenizer.json").write_text('{"model": {"type": "NoSuchModel"}}')
    result = check(tiny_release)
    [problem] = result.problems
    assert result.tokenizer is None and "tokenizer.json" in problem and "does not load" in problem


def test_a_tokenizer_of_untrusted_code_is_not_run(tiny_release: Path) -> None:
    config = json.loads((tiny_release / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["tokenization_acme.AcmeTokenizer", None]}
    (tiny_release / "tokenizer_config.json").write_text(json.dumps(config))
    result = check(tiny_release)
    assert result.problems == [] and result.tokenizer is None
    [not_checked] = result.not_checked
    assert "auto_map" in not_checked and "model.trust_remote_code" in not_checked


def test_a_chat_template_that_does_not_render_is_named(tiny_release: Path) -> None:
    (tiny_release / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ m.content | no_such_filter }}{% endfor %}"
    )
    [problem] = check(tiny_release).problems
    assert "chat_template.jinja" in problem and "does not render" in problem


def test_hub_cache_at_a_revision_is_read(tiny_release: Path, tmp_path: Path) -> None:
    snapshot = make_hub_cache(tmp_path / "hub", "acme/tiny", config_of(MODEL), revision="v1")
    for path in tiny_release.iterdir():
        shutil.copy(path, snapshot / path.name)
    result = check("hf://acme/tiny@v1", HubSettings(cache_dir=tmp_path / "hub", offline=True))
    assert result.directory == snapshot and result.problems == [] and result.tokenizer is not None
    assert result.weights is not None and result.weights.headers_read


def test_hub_cache_without_shards_compares_names_from_the_index(tiny_release: Path, tmp_path: Path) -> None:
    """What a hub cache holds for a release day0 fetched: config, tokenizer and the index, no weights."""
    snapshot = make_hub_cache(tmp_path / "hub", "acme/tiny", config_of(MODEL))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "model.safetensors.index.json"):
        shutil.copy(tiny_release / name, snapshot / name)
    index = json.loads((snapshot / "model.safetensors.index.json").read_text())
    del index["weight_map"][EXPERT]
    (snapshot / "model.safetensors.index.json").write_text(json.dumps(index))
    result = check("hf://acme/tiny", HubSettings(cache_dir=tmp_path / "hub", offline=True))
    [not_checked] = result.not_checked
    assert "shard headers" in not_checked and "names compared from the index only" in not_checked
    assert "go online to read the shard headers of acme/tiny by range requests" in not_checked
    assert result.weights is not None and not result.weights.headers_read
    assert result.weights.missing == [EXPERT] and result.tokenizer is not None


def _index_only(tiny_release: Path, tmp_path: Path, weight_map: dict[str, str]) -> Path:
    only = tmp_path / "index-only"
    only.mkdir()
    shutil.copy(tiny_release / "config.json", only)
    (only / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return only


def test_an_index_of_deepseek_v3_size_is_read(tiny_release: Path, tmp_path: Path) -> None:
    """DeepSeek-V3's index is about 8 MiB: beyond the 1 MiB bound of a config, within the index's."""
    weight_map = json.loads((tiny_release / "model.safetensors.index.json").read_text())["weight_map"]
    mtp = {f"model.layers.61.mlp.experts.{e}.{p}_proj.weight": "x.safetensors" for e in range(8000) for p in "gud"}
    only = _index_only(tiny_release, tmp_path, weight_map | mtp)
    assert (only / "model.safetensors.index.json").stat().st_size > 1 << 20
    result = check(only)
    assert result.problems == [] and result.weights is not None and result.weights.ignored == len(mtp)


def test_an_index_naming_a_file_elsewhere_is_refused(tiny_release: Path, tmp_path: Path) -> None:
    only = _index_only(tiny_release, tmp_path, {EXPERT: "../outside.safetensors"})
    with pytest.raises(ModelError, match="not a shard file name in the same folder") as info:
        check(only)
    assert info.value.field == "model.safetensors.index.json" and EXPERT in str(info.value)


def test_a_config_only_source_says_what_it_could_not_check() -> None:
    result = check(MODEL)
    assert result.problems == [] and result.tokenizer is None and result.weights is None
    assert [n.split(":")[0] for n in result.not_checked] == ["tokenizer and chat template", "weights"]


def test_rope_scaling_of_released_configs() -> None:
    deepseek = rope_context(config_of("deepseek-v3"))
    assert (deepseek.kind, deepseek.factor, deepseek.original_max_position_embeddings) == ("yarn", 40, 4096)
    assert deepseek.supported == 40 * 4096 == config_of("deepseek-v3")["max_position_embeddings"]
    # Qwen's way: max_position_embeddings stays the original and YaRN extends it.
    qwen = {"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4.0}}
    assert rope_context(qwen).supported == 4 * 32768
    llama = config_of("llama-3.1-405b")
    assert rope_context(llama).kind == "llama3" and rope_context(llama).supported == llama["max_position_embeddings"]
    assert rope_context({"max_position_embeddings": 2048}).describe() == "max_position_embeddings (2,048)"


def test_step_1_reports_the_release_and_fails_on_its_problems(tiny_fp8_release: Path) -> None:
    analyzed = analyze_model(ModelSpec(source=str(tiny_fp8_release)), load_platform("cpu"), "fp32")
    assert analyzed.release is not None and analyzed.release.problems == []
    assert analyzed.verdict in ("pass", "warn") and "release files" in analyzed.headline
    report = analyzed.to_markdown()
    assert "## The release's files" in report and "block-scaled 128x128 F8_E4M3 with `weight_scale_inv`" in report
    assert "quantization_config: quant_method fp8" in report and "round trip" in report
    broken = analyzed.release.model_copy(update={"problems": ["model-00001-of-00003.safetensors: x"]})
    failed = analyzed.model_copy(update={"release": broken})
    assert failed.judge().verdict == "fail" and failed.judge().reasons == broken.problems
