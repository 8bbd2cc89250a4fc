"""Issue 42 item 1's done-when: the host's stock kernels, taken as the platform, raise no alarm at the
full widths of five released models (real hidden, intermediate, expert and vocabulary widths; the
capture's 1 x 16 tokens), against an fp64 reference. Before the control, Kimi K2's alone raised 3
(`_foreach_norm`, an fp32 router GEMM, `_log_softmax`'s gradient), Qwen3-235B-A22B 3."""

from __future__ import annotations

import pytest

from day0.model.build import build_meta_model, load_hf_config
from day0.model.source import resolve_model_source
from day0.model.structure import analyze_structure
from day0.platforms.kernels import Platform
from day0.steps.analyze.inventory import capture_operators
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.op_policy import accumulates
from day0.steps.operators.opcheck import check_inventory

MODELS = ["deepseek-v3", "kimi-k2", "qwen3-235b-a22b", "llama-3.1-405b", "mixtral-8x7b"]


@pytest.mark.integration  # 3-8 s a model on 2 cores: the fp64 reference of full-width GEMMs
@pytest.mark.parametrize("name", MODELS)
def test_stock_kernels_raise_no_alarm_at_full_width(name: str) -> None:
    model = build_meta_model(load_hf_config(resolve_model_source(name)), name, "bf16")
    inventory = capture_operators(model, analyze_structure(model, name).attention_kind, "bf16")
    # the ops whose expected error grows with the width: every other op rounds each element once
    summing = [r.op for r in inventory.ops if accumulates(r.op)]
    report = check_inventory(
        inventory,
        Platform("cpu"),
        ValidationSpec(reference_dtype="fp64"),
        ["bf16"],
        ops=summing,
        max_examples=1,
        max_elements=1 << 24,
    )
    alarms = [
        f"{c.op} at {c.dtype}: {c.reason}" for c in report.checks if c.status == "fail" or c.grad_status == "fail"
    ]
    assert not alarms, alarms
    assert len(report.checks) == len(summing) >= 10
