"""Operator inventory of a forward+backward pass on meta tensors."""

from __future__ import annotations

import pytest
import torch

from day0.core.ops import OpInventory, build_call
from day0.model.build import build_meta_model, load_hf_config
from day0.model.source import resolve_model_source
from day0.model.structure import analyze_structure
from day0.steps.analyze.inventory import _kept_whole, _Recorder, capture_operators


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


def test_optimizer_step_is_captured_as_the_trial_runs_it() -> None:
    """Clipping and the AdamW update, foreach kernels, on fp32 master weights of a bf16 model."""
    inv = inventory("tiny-deepseek-v3", "bf16")
    ops = inv.by_name()
    optimizer = {r.op for r in inv.ops if "optimizer" in r.phases}
    assert {
        "aten::_foreach_norm.Scalar",
        "aten::_foreach_mul_.Tensor",
        "aten::_foreach_lerp_.Scalar",
        "aten::_foreach_addcmul_.Scalar",
        "aten::_foreach_sqrt",
        "aten::_foreach_addcdiv_.ScalarList",
    } <= optimizer
    lerp = ops["aten::_foreach_lerp_.Scalar"]
    assert lerp.phases == ["optimizer"] and lerp.modules == ["optimizer: AdamW"] and lerp.dtypes == ["fp32"]
    assert ops["aten::_foreach_norm.Scalar"].modules == ["optimizer: gradient clipping"]
    exp_avgs, grads, weight = lerp.examples[0]
    assert len(exp_avgs) == len(grads) > 10 and weight == pytest.approx(0.1)  # one tensor per parameter, 1 - beta1
    assert {"shape": [4096, 256], "dtype": "fp32"} in exp_avgs  # the embedding's fp32 master copy
    # the scalar add of clipping (norm + 1e-6) is kept as an example of its own
    add = ops["aten::add.Tensor"]
    assert "optimizer" in add.phases and [{"shape": [], "dtype": "fp32"}, 1e-06] in add.examples
    # host-side step counters and profiler markers are not device kernels
    assert "aten::_foreach_add_.Tensor" not in ops and not any(op.startswith("profiler::") for op in ops)
    assert ops["aten::nll_loss_forward"].modules == ["loss"]  # the trial's loss, not the model's own


def test_captured_optimizer_ops_are_those_a_real_step_runs(tiny: OpInventory) -> None:
    """No drift between the capture and what the trial's optimizer runs: the same functions on real
    CPU tensors run the captured ops, plus only the host-side step-counter bookkeeping."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from day0.core.ops import op_name
    from day0.core.training import clip_gradients, make_optimizer

    class Names(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(op_name(func))
            return func(*args, **(kwargs or {}))

    params = [torch.nn.Parameter(torch.randn(8, 4)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer, names = make_optimizer(params, 3e-4), Names()
    with names:
        clip_gradients(params)
        optimizer.step()
    captured = {r.op for r in tiny.ops if "optimizer" in r.phases}
    host = {"aten::_foreach_add_.Tensor", "aten::lift_fresh", "aten::_local_scalar_dense"}
    real = {op for op in names.ops if not op.startswith("profiler::")}
    assert captured == real - host, captured ^ (real - host)


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_cli_analyze_json_lists_optimizer_ops() -> None:
    import json

    from tests.fixtures.cli import day0

    proc = day0("analyze", "tiny-deepseek-v3", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    optimizer = {r["op"] for r in result["inventory"]["ops"] if "optimizer" in r["phases"]}
    assert {
        "aten::_foreach_lerp_.Scalar",
        "aten::_foreach_addcdiv_.ScalarList",
        "aten::_foreach_norm.Scalar",
    } <= optimizer
    assert {o["op"] for o in result["coverage"]["ops"] if "optimizer" in o["phases"]} == optimizer


# --- CIA ops kept whole (as a device with its own kernel runs them) ----------------------------

KEEP = ("aten::scaled_dot_product_attention", "aten::softmax.int", "aten::matmul")


def _softmax_step(recorder: _Recorder) -> None:
    x = torch.empty(4, 8, device="meta", requires_grad=True)
    with recorder:
        y = torch.softmax(x * 2, -1)
        recorder.phase = "backward"
        y.sum().backward()


def test_a_kept_cia_op_is_recorded_whole_and_its_backward_as_autograd_runs_it() -> None:
    plain, whole = _Recorder(), _Recorder()
    _softmax_step(plain)
    with _kept_whole(whole, ["aten::softmax.int"]) as kept:
        _softmax_step(whole)
    assert kept == ["aten::softmax.int"]
    assert "aten::softmax.int" not in plain.records and "aten::_softmax" in plain.records  # decomposed
    softmax = whole.records["aten::softmax.int"]
    assert softmax.phases == ["forward"] and softmax.dtypes == ["fp32"] and softmax.calls == 1
    assert "aten::_softmax" not in whole.records  # its piece
    assert whole.records["aten::_softmax_backward_data"].phases == ["backward"]  # autograd ran the pieces' backward
    [example] = softmax.examples
    args, kwargs = build_call("aten::softmax.int", example)
    torch.testing.assert_close(torch.ops.aten.softmax.int(*args, **kwargs), torch.softmax(args[0], -1))


def test_keep_whole_leaves_ops_that_reach_the_mode_whole_alone() -> None:
    """Not CIA (mm), or CIA with a Meta kernel (silu_backward), or unknown: nothing registered."""
    with _kept_whole(_Recorder(), ["aten::mm", "aten::silu_backward", "aten::no_such_op"]) as kept:
        assert kept == []


def test_registrations_are_removed_whatever_happens() -> None:
    op = torch.ops.aten.softmax.int
    table, py_kernels = torch._C._dispatch_dump_table("aten::softmax.int"), dict(op.py_kernels)
    with pytest.raises(RuntimeError, match="boom"), _kept_whole(_Recorder(), ["aten::softmax.int"]):
        assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::softmax.int", "AutogradMeta")
        raise RuntimeError("boom")
    assert torch._C._dispatch_dump_table("aten::softmax.int") == table and op.py_kernels == py_kernels
    plain = _Recorder()
    _softmax_step(plain)
    assert "aten::softmax.int" not in plain.records


def _capture(name: str, dtype: str, keep_whole: tuple[str, ...] = ()) -> OpInventory:
    model = build_meta_model(load_hf_config(resolve_model_source(name)), name, dtype)
    return capture_operators(model, analyze_structure(model, name).attention_kind, dtype, keep_whole=keep_whole)


def test_tiny_model_with_attention_softmax_and_matmul_kept_whole() -> None:
    plain, whole = _capture("tiny-qwen3-moe", "bf16"), _capture("tiny-qwen3-moe", "bf16", KEEP)
    assert plain.kept_whole == [] and whole.kept_whole == sorted(KEEP)
    ops, before = whole.by_name(), plain.by_name()
    assert set(ops) - set(before) == set(KEEP)
    for op in KEEP:
        assert ops[op].examples and ops[op].phases == ["forward"] and ops[op].modules, ops[op]
    gone = set(before) - set(ops)
    assert "aten::_safe_softmax" in gone  # the attention's softmax, inside sdpa now
    assert all(before[op].phases == ["forward"] for op in gone)  # only forward pieces go
    assert {r.op for r in plain.in_phase("backward")} == {r.op for r in whole.in_phase("backward")}
    assert ops["aten::scaled_dot_product_attention"].modules == ["layers.0 (gqa+moe)"]


def test_keep_whole_of_ops_already_whole_changes_nothing() -> None:
    plain = _capture("tiny-qwen3-moe", "bf16")
    same = _capture("tiny-qwen3-moe", "bf16", ("aten::mm", "aten::silu_backward"))
    assert same.ops == plain.ops and same.kept_whole == []


def test_step2_checks_the_kept_ops_whole() -> None:
    """Step 2's opcheck rebuilds each whole op from its examples and checks its numerics (and
    gradients) against the fp64 reference."""
    from day0.platforms.kernels import Platform
    from day0.steps.operators.config import ValidationSpec
    from day0.steps.operators.opcheck import check_inventory

    inv = _capture("tiny-qwen3-moe", "bf16", KEEP)
    report = check_inventory(inv, Platform("cpu"), ValidationSpec(), ["bf16"], ops=KEEP)
    assert {c.op for c in report.checks} == set(KEEP)
    for check in report.checks:
        assert check.status == "pass" and check.examples >= 1 and check.grad_status == "pass", check
