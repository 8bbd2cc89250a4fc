"""Operator inventory of a forward+backward pass on meta tensors."""

from __future__ import annotations

import pytest
import torch

from day0.analysis.inventory import _Recorder, capture_operators
from day0.analysis.structure import analyze_structure
from day0.core.model_source import resolve_model_source
from day0.core.modeling import build_meta_model, load_hf_config
from day0.core.ops import OpInventory


def inventory(name: str, dtype: str) -> OpInventory:
    model = build_meta_model(load_hf_config(resolve_model_source(name)), name, dtype)
    return capture_operators(model, analyze_structure(model, name).attention_kind, dtype)


@pytest.fixture(scope="module")
def tiny() -> OpInventory:
    return inventory("tiny-deepseek-v3", "fp32")


def test_one_layer_of_each_kind_is_captured(tiny: OpInventory) -> None:
    assert tiny.layers_captured == ["mla+dense", "mla+moe"]


def test_forward_and_backward_ops_with_shapes(tiny: OpInventory) -> None:
    ops = tiny.by_name()
    assert {
        "aten::mm",
        "aten::embedding",
        "aten::embedding_dense_backward",
        "aten::silu_backward",
        "aten::nll_loss_forward",
        "aten::nll_loss_backward",
    } <= set(ops)
    assert ops["aten::embedding_dense_backward"].phases == ["backward"]
    assert "forward" in ops["aten::mm"].phases and "backward" in ops["aten::mm"].phases
    emb = ops["aten::embedding"].examples[0]
    assert emb[0] == {"shape": [4096, 256], "dtype": "fp32"}  # (vocab, hidden) weight
    assert all(r.calls >= 1 for r in tiny.ops)


def test_moe_ops_are_attributed_to_the_moe_layer(tiny: OpInventory) -> None:
    grouped = tiny.by_name()["aten::_grouped_mm"]
    assert grouped.modules == ["layers.1 (mla+moe)"]
    assert tiny.by_name()["aten::embedding"].modules == ["embed_tokens"]


def test_compute_dtype_is_honoured() -> None:
    inv = inventory("llama-3-8b", "bf16")
    assert inv.by_name()["aten::mm"].dtypes == ["bf16"]
    assert inv.layers_captured == ["gqa+dense"]


def test_dtype_restricted_kernel_is_reported_not_fatal() -> None:
    """A kernel that rejects fp32 is recorded as a constraint and run at bf16 so capture goes on."""
    lib = torch.library.Library("day0test", "DEF")
    lib.define("bf16_only(Tensor x) -> Tensor")

    def kernel(x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16:
            raise RuntimeError(f"bf16_only: expected BFloat16 but got {x.dtype}")
        return x.clone()

    lib.impl("bf16_only", kernel, "Meta")
    recorder = _Recorder()
    x = torch.empty(4, 4, device="meta")
    with recorder:
        y = torch.ops.day0test.bf16_only(x) * 2
    assert y.dtype == torch.float32
    [constraint] = recorder.constraints.values()
    assert constraint.op == "day0test::bf16_only" and constraint.dtype == "fp32" and "BFloat16" in constraint.message
