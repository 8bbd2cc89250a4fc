"""Bad SLO, quantisation and benchmark values in a spec get one clear error naming the field, and
an engine day0 cannot launch is refused naming `inference.engine` before anything starts."""

from __future__ import annotations

from typing import Any

import pytest

from day0.errors import SpecError, UsageError
from day0.spec.pipeline import spec_from_dict
from day0.steps.inference.serve import InferenceRequest, run_inference
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


def test_an_engine_day0_cannot_launch_is_refused_by_field() -> None:
    request = InferenceRequest(
        model="tiny-qwen3-moe", served=served(), inference=_spec({"engine": "vllm"}).inference, platform=cpu()
    )
    with pytest.raises(UsageError, match=r"inference\.engine: 'vllm'"):
        run_inference(request)
