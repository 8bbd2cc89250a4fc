"""Weight-only quantisation of a tiny MoE: the fused 3-D experts are covered (not only nn.Linear),
storage shrinks, quality stays within tolerance, and a deliberately broken quantiser (wrong scales)
is caught by the quality check and fails the step's verdict."""

from __future__ import annotations

import pytest
import torch

from day0.steps.inference.config import SLO, QualityTolerance
from day0.steps.inference.model import build_served_model, held_out_text, load_tokenizer
from day0.steps.inference.quality import compare_quality, windows
from day0.steps.inference.quantize import Int8PerChannel, quantize_model
from day0.steps.inference.result import InferenceResult
from tests.fixtures.inference import served


class WrongScales(Int8PerChannel):
    """int8 with every expert scale stored 3x too large: the kind of bug a quality gate must catch."""

    def encode(self, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        data, scale = super().encode(weight)
        return data, scale * 3


@pytest.fixture(scope="module")
def batch() -> torch.Tensor:
    tokenizer = load_tokenizer(served().tokenizer)
    return windows(list(tokenizer(held_out_text())["input_ids"]), 128, 8)


@pytest.mark.parametrize("method", ["int8-weight", "fp8"])
def test_experts_are_quantised_and_quality_holds(method: str, batch: torch.Tensor) -> None:
    reference, model = build_served_model(served()), build_served_model(served())
    report = quantize_model(model, method)
    assert report.expert_tensors == 4  # gate_up_proj and down_proj of both MoE layers
    assert report.linear_weights > 0
    # experts are most of this MoE: a Linear-only quantiser would stay near 0.25 of the weights
    assert report.fraction_quantized > 0.85
    assert report.size_ratio < 0.45
    experts = model.model.layers[0].mlp.experts
    assert experts.gate_up_proj_q.dtype == (torch.int8 if method == "int8-weight" else torch.float8_e4m3fn)
    assert "gate_up_proj" not in dict(experts.named_parameters())
    quality = compare_quality(reference, model, batch, QualityTolerance(), "held-out")
    assert quality.passed, quality.failures
    assert quality.perplexity_quantized != quality.perplexity_reference  # the weights really changed
    if method == "fp8":
        assert any("storage only" in n for n in report.notes)


def test_a_quantiser_with_wrong_scales_fails_the_quality_check(batch: torch.Tensor) -> None:
    reference, broken = build_served_model(served()), build_served_model(served())
    report = quantize_model(broken, "int8-weight", expert_codec=WrongScales())
    quality = compare_quality(reference, broken, batch, QualityTolerance(), "held-out")
    assert not quality.passed
    assert any("perplexity rose" in f or "agreement" in f for f in quality.failures)
    result = InferenceResult(
        model="tiny-qwen3-moe", served="x", engine="transformers serve", device="cpu",
        quantization="int8-weight", quantized=report, quality=quality, slo=SLO(), seconds=1.0,
    )  # fmt: skip
    assert result.verdict == "fail"
    assert InferenceResult.model_validate_json(result.model_dump_json()).quality == quality  # result.json round trip
    assert any("beyond the 2.00% tolerance" in r or "below 90.00%" in r for r in result.reasons)
