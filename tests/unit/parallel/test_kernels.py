"""The ops-per-step counts of the host-dispatch term (`day0.planner.kernels`) against a real count: every
aten call of one training step of real tiny models, run the way the trial runs it."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig

from day0.core.dtypes import DTYPES
from day0.core.training import clip_gradients, forward_loss, make_optimizer
from day0.model.build import build_meta_model
from day0.model.source import resolve_model_source
from day0.model.structure import analyze_structure
from day0.planner.kernels import model_kernels
from day0.planner.model import model_costs
from day0.platforms.kernels import Platform
from day0.steps.trial.config import TrialScale
from day0.steps.trial.model import build_trial_model, scale_config


def _config(name: str, scale: TrialScale) -> dict:
    return scale_config(resolve_model_source(name).config, scale, vocab_size=300, seq_len=16, eos_token_id=1)


def _real_counts(cfg: dict, compute: str, batch: int, seq: int) -> tuple[int, int]:
    """(forward + loss + backward ops, clipping + AdamW ops) of the second training step."""
    torch.manual_seed(0)
    model = build_trial_model(cfg, seed=0)
    model.train()
    opt = make_optimizer(model.parameters(), 1e-3)
    ids = torch.randint(0, 300, (batch, seq + 1))
    counts = (0, 0)
    for _ in range(2):  # the first step creates AdamW's state
        passes, update = Platform("host").mode(), Platform("host").mode()  # every stock kernel, each call counted
        with passes:
            forward_loss(model, ids, DTYPES[compute]).backward()
        with update:
            clip_gradients(model.parameters(), 1.0)
            opt.step()
        opt.zero_grad(set_to_none=True)
        counts = (sum(passes.served.values()), sum(update.served.values()))
    return counts


def _formula(cfg: dict, compute: str) -> tuple[float, float]:
    costs = model_costs(analyze_structure(build_meta_model(AutoConfig.for_model(**cfg), "t", "fp32"), "t"))
    k = model_kernels(costs, compute)
    moe = sum(1 for i in costs.layer_kind if costs.kinds[i].is_moe)
    return costs.num_layers * k.dense_layer + moe * k.moe_extra + k.outside, k.optimizer


@pytest.mark.parametrize(
    ("name", "scale", "compute"),
    [
        ("tiny-deepseek-v3", TrialScale(), "bf16"),  # MLA: 1 dense + 2 MoE layers
        ("tiny-deepseek-v3", TrialScale(layers=4, hidden=64), "fp32"),
        ("tiny-qwen3-moe", TrialScale(), "bf16"),  # GQA + MoE
        ("llama-3-8b", TrialScale(layers=3, hidden=64), "bf16"),  # GQA dense
    ],
)
def test_formula_matches_a_real_count(name: str, scale: TrialScale, compute: str) -> None:
    cfg = _config(name, scale)
    real_passes, real_update = _real_counts(cfg, compute, batch=2, seq=16)
    passes, update = _formula(cfg, compute)
    assert passes == pytest.approx(real_passes, rel=0.03), (passes, real_passes)
    assert update == pytest.approx(real_update, rel=0.03), (update, real_update)


def test_counts_scale_with_layers_not_with_tokens() -> None:
    small, large = _config("tiny-deepseek-v3", TrialScale(layers=2)), _config("tiny-deepseek-v3", TrialScale(layers=4))
    # the real count hardly moves with the batch or the sequence (the formula has no token term; the MoE
    # routing's data-dependent path moves it by a few ops)
    few, many = _real_counts(small, "bf16", batch=1, seq=8), _real_counts(small, "bf16", batch=3, seq=24)
    assert few[0] == pytest.approx(many[0], rel=0.01) and few[1] == many[1]
    (p2, u2), (p4, u4) = _formula(small, "bf16"), _formula(large, "bf16")
    per_moe_layer = model_kernels(
        model_costs(analyze_structure(build_meta_model(AutoConfig.for_model(**large), "t", "fp32"), "t")), "bf16"
    )
    assert p4 - p2 == pytest.approx(2 * (per_moe_layer.dense_layer + per_moe_layer.moe_extra))
    assert u4 > u2  # more parameter tensors, more per-tensor optimizer ops
    assert _formula(small, "fp32")[0] < p2  # autocast's casts are ops too
