"""Step 2 runs one layer of the release's own weights: tiny releases built here (transformers' sharded
save of tiny-deepseek-v3 and its DeepSeek-V3-style FP8 block-scaled copy), and broken ones, each
failing naming the file and tensor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from day0.model.source import ResolvedModel
from day0.platforms.kernels import Platform
from day0.steps.operators.layers import WholeModel
from day0.steps.operators.real_weights import check_real_weights, dequantize_fp8
from day0.steps.operators.result import BYTES_PER_PARAM, OpCheckReport, OperatorsResult, RealWeightsCheck
from tests.fixtures.release import (
    TINY_RELEASE_MODEL,
    config_of,
    quantize_fp8_blocks,
    read_tensors,
    save_model,
    write_checkpoint,
)

MODEL = TINY_RELEASE_MODEL  # layer 0 dense, layers 1-2 MoE with 8 routed experts
LAYER = 1
Q_A = f"model.layers.{LAYER}.self_attn.q_a_proj.weight"


def whole(directory: Path) -> WholeModel:
    config = json.loads((directory / "config.json").read_text())
    return WholeModel(
        model=ResolvedModel(source=str(directory), directory=directory, config=config), keep_layers=[0, LAYER]
    )


def run(directory: Path, dtype: str = "bf16", **kwargs: int) -> RealWeightsCheck:
    return check_real_weights(whole(directory), Platform("cpu"), dtype, **kwargs)  # type: ignore[arg-type]


def test_dequantize_fp8_multiplies_each_128_block_by_its_scale() -> None:
    torch.manual_seed(0)
    w = torch.randn(300, 200) * torch.linspace(0.01, 10, 300)[:, None]  # rows of very different ranges
    q = quantize_fp8_blocks({"x.proj.weight": w})
    out, why = dequantize_fp8(q["x.proj.weight"], q["x.proj.weight_scale_inv"], [128, 128], "s")
    assert why is None and out is not None and out.dtype == torch.float32
    assert q["x.proj.weight_scale_inv"].shape == (3, 2)
    # e4m3 keeps 3 mantissa bits: each element within 1/16 of itself (or of the block's smallest step)
    assert torch.allclose(out, w, rtol=1 / 16, atol=float(q["x.proj.weight_scale_inv"].max()) * 2**-6)
    assert (out - w).abs().max() > 0  # quantised: not the original bits
    wrong, why = dequantize_fp8(q["x.proj.weight"], q["x.proj.weight_scale_inv"][:2], [128, 128], "s")
    assert wrong is None and why == "s: shape [2, 2], the weight [300, 200] needs [3, 2]"
    scale = q["x.proj.weight_scale_inv"].clone()
    scale[1, 1] = float("nan")
    assert (
        dequantize_fp8(q["x.proj.weight"], scale, [128, 128], "s")[1] == "s: 1 of 6 scales are not finite and positive"
    )


def test_a_layer_of_the_fp8_release_runs_within_tolerance(tiny_releases: tuple[Path, Path]) -> None:
    plain, tiny_fp8_release = tiny_releases
    check = run(tiny_fp8_release)
    assert check.problems == [] and check.not_run is None and check.passed
    assert check.layer == LAYER and check.experts == "4 of 8 routed experts (the router's rows for them)"
    report = check.layers
    assert report is not None and report.compute_dtype == "bf16" and report.reference_dtype == "fp64"
    assert {r.module for r in report.rows} == {"embed_tokens", f"layers.{LAYER}", "norm", "lm_head"}
    assert {r.phase for r in report.rows} == {"forward", "backward", "param_grad"}
    assert any(r.metrics.rel_rmse > 0 for r in report.rows)  # bf16 against fp64: real error measured
    # the fixture's FP8 projections (*proj.weight): attention's q_a, q_b, kv_b, o (kv_a_proj_with_mqa
    # stays fp32), the shared expert's and 4 routed experts' gate, up and down
    assert check.dequantised == 4 + 3 + 4 * 3
    index = json.loads((tiny_fp8_release / "model.safetensors.index.json").read_text())["weight_map"]
    assert f"model.layers.{LAYER}.mlp.experts.7.down_proj.weight" in index  # in the release, not read
    assert check.files == sorted(set(index.values()))
    # the same weights (up to FP8 rounding) as the unquantised release; other weights give another loss
    same = run(plain)
    assert same.dequantised == 0 and same.layers is not None
    assert report.loss_reference == pytest.approx(same.layers.loss_reference, rel=1e-2)
    other = save_model(plain.parent / "reseeded", MODEL)
    write_checkpoint(other, {k: v * 3 for k, v in read_tensors(other).items()})
    assert run(other).layers.loss_reference != pytest.approx(report.loss_reference, rel=1e-2)  # type: ignore[union-attr]
    markdown = check.to_markdown(None)
    assert "A layer of the real weights: within tolerance" in markdown and "19 FP8 tensors dequantised" in markdown


def test_config_only_release_is_not_run_never_a_pass(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config_of(MODEL)))
    check = run(tmp_path)
    assert check.layers is None and not check.passed and check.reasons() == []
    assert check.not_run and "no weights" in check.not_run and "config only" in check.not_run
    assert check.headline().startswith("not run: the release has no weights")
    assert "not run" in check.to_markdown(None)


def test_the_budget_keeps_fewer_experts_then_refuses(tiny_fp8_release: Path) -> None:
    one = run(tiny_fp8_release, budget_bytes=0)
    assert (
        one.not_run
        and "beyond the budget" in one.not_run
        and one.experts == "1 of 8 routed experts (the router's rows for them)"
    )
    assert one.tensors == 0 and one.layers is None  # nothing read
    expert = 3 * 256 * 128 + 256  # gate, up, down (hidden 256, moe_intermediate 128), a router row
    budget = one.estimate_bytes + 2 * expert * BYTES_PER_PARAM  # three experts fit, four do not
    fewer = run(tiny_fp8_release, budget_bytes=budget)
    assert fewer.not_run is None and fewer.experts and fewer.experts.startswith("3 of 8")
    assert fewer.estimate_bytes == budget and fewer.dequantised == 4 + 3 + 3 * 3


def _scale_problem(tiny_fp8_release: Path, tensor: str, value: float) -> RealWeightsCheck:
    tensors = read_tensors(tiny_fp8_release)
    tensors[tensor] = tensors[tensor].clone().fill_(value)
    write_checkpoint(tiny_fp8_release, tensors)
    return run(tiny_fp8_release)


@pytest.mark.parametrize("value", [float("nan"), 0.0])
def test_a_bad_scale_fails_naming_the_file_and_tensor(tiny_fp8_release: Path, value: float) -> None:
    scale = f"{Q_A}_scale_inv"
    check = _scale_problem(tiny_fp8_release, scale, value)
    index = json.loads((tiny_fp8_release / "model.safetensors.index.json").read_text())["weight_map"]
    assert check.layers is None and len(check.problems) == 1
    assert check.problems[0].startswith(f"{index[scale]}: scale tensor {scale!r}: ")
    assert "not finite and positive" in check.problems[0]
    result = OperatorsResult(
        ops=OpCheckReport(
            platform="cpu", compute_dtypes=["bf16"], reference_dtype="fp32", seeds=1, checks=[], seconds=0,
            ops_per_second=0,
        ),
        real_weights=check,
    )  # fmt: skip
    judged = result.judge()
    assert judged.verdict == "fail" and judged.reasons[0] == f"real-weights layer: {check.problems[0]}"
    assert judged.headline["real-weights layer"] == "1 problems in the release's tensors"
    assert f"- PROBLEM: {check.problems[0]}" in result.to_markdown()


def test_a_missing_scale_and_a_wrong_shape_fail_naming_the_file_and_tensor(tiny_fp8_release: Path) -> None:
    tensors = read_tensors(tiny_fp8_release)
    del tensors[f"{Q_A}_scale_inv"]
    o_proj = f"model.layers.{LAYER}.self_attn.o_proj.weight"
    tensors[o_proj] = tensors[o_proj][:, :-1].contiguous()
    write_checkpoint(tiny_fp8_release, tensors)
    index = json.loads((tiny_fp8_release / "model.safetensors.index.json").read_text())["weight_map"]
    problems = run(tiny_fp8_release).problems
    assert f"{index[Q_A]}: FP8 tensor {Q_A!r} has no {Q_A}_scale_inv (nor _scale) in the checkpoint" in problems
    assert f"{index[o_proj]}: tensor {o_proj!r} is [256, 127] in the checkpoint, the model's is [256, 128]" in problems


def test_a_missing_shard_names_it_and_a_tensor_it_holds(tiny_fp8_release: Path) -> None:
    index = json.loads((tiny_fp8_release / "model.safetensors.index.json").read_text())["weight_map"]
    (tiny_fp8_release / index[Q_A]).unlink()
    problems = run(tiny_fp8_release).problems
    assert len(problems) == 1 and problems[0].startswith(f"{index[Q_A]}: holds ") and "is not in" in problems[0]


def test_an_index_without_its_shards_is_not_run(tiny_fp8_release: Path) -> None:
    """What a hub cache holds for a release fetched without weights: config and index."""
    for shard in tiny_fp8_release.glob("*.safetensors"):
        shard.unlink()
    check = run(tiny_fp8_release)
    assert check.problems == [] and check.layers is None and not check.passed
    assert check.not_run == (
        "the release has no weights here: none of the 3 shards in model.safetensors.index.json is in "
        f"{tiny_fp8_release}"
    )


def test_step_1s_result_picks_the_first_moe_layer_of_the_release(tiny_releases: tuple[Path, Path]) -> None:
    """Step 1 on the FP8 release (its shards, dtypes and tokenizer checked), then step 2's real-weights
    layer from step 1's result, as `day0 run` chains them."""
    from day0.spec.pipeline import ModelSpec, load_platform
    from day0.steps.analyze.run import analyze_model

    analyzed = analyze_model(ModelSpec(source=str(tiny_releases[1])), load_platform("cpu"), "bf16")
    release = analyzed.release
    assert release is not None and release.problems == [] and release.weights is not None
    assert len(release.weights.shards) == 3 and set(release.weights.bytes_by_dtype) == {"F32", "F8_E4M3"}
    assert release.not_checked == [] and release.tokenizer is not None and release.tokenizer.round_trip
    chosen = WholeModel.from_analysis(analyzed)
    assert chosen.keep_layers == [0, LAYER]  # the dense layer 0, then the first MoE layer
    check = check_real_weights(chosen, Platform("cpu"), "bf16")
    assert check.passed and check.layer == LAYER and check.dequantised == 4 + 3 + 4 * 3
