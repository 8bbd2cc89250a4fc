"""The candidate trains on the platform: under its kernel table with step 2's adaptations applied (the
loop run bare, as a Ray Train worker runs it), and on the GPU for a `cuda` platform when one is here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from day0.paths import CONFIGS_DIR
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import load_yaml
from day0.steps.trial.loop import LoopStep, run_steps
from tests.fixtures.paths import REPO
from tests.fixtures.trial import tiny_data, tiny_loop
from testsupport.fault_matrix import Fault, install_plugins

SIGMOID = Fault(
    name="sigmoid_wrong_fp32",
    layer="numerical",
    description="sigmoid via a low-order exp, fp32 only",
    kernel="tests.fixtures.faulty_kernels:sigmoid_wrong_fp32",
)


@pytest.fixture(scope="module")
def vendor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformSpec]:
    """The CPU platform whose vendor plugin (installed as an entry point) has a wrong fp32 sigmoid."""
    saved = os.environ.get("PYTHONPATH")
    install_plugins([SIGMOID], tmp_path_factory.mktemp("site"), [REPO])
    spec = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "cpu.yaml"))
    yield spec.model_copy(update={"name": "cpu-wrong-sigmoid", "vendor_plugin": SIGMOID.name})
    os.environ.pop("PYTHONPATH") if saved is None else os.environ.update(PYTHONPATH=saved)


def _train(**update) -> list[LoopStep]:
    return [LoopStep.model_validate(h) for h in run_steps(tiny_loop(3, **update), tiny_data().tokens)]


def test_candidate_runs_the_vendor_kernels_and_step_2s_adaptations(vendor: PlatformSpec) -> None:
    from day0.steps.operators.checks import run_operators
    from day0.steps.trial.train import adapted_kernels
    from tests.fixtures.numerics import tiny_inventory

    stock = _train()
    assert all(not h.kernel_calls for h in stock)  # no platform: stock kernels, nothing routed

    on_vendor = _train(platform=vendor)
    assert on_vendor[-1].kernel_calls.get(f"plugin:{SIGMOID.name}", 0) > 0  # the router's sigmoid, every step

    # step 2 finds the wrong kernel and adapts it; its result's adaptations reach the loop as data
    checked = run_operators(tiny_inventory("fp32"), vendor, compute_dtype="fp32", max_elements=1 << 16)
    adapted = adapted_kernels(checked.ops.adaptations)
    sigmoid = next(a for a in adapted if a.op == "aten::sigmoid")
    assert checked.verdict == "fail"  # a vendor kernel with wrong numbers fails step 2, adapted or not
    fixed = _train(platform=vendor, adaptations=adapted)
    calls = fixed[-1].kernel_calls
    assert calls.get(f"adapt:{sigmoid.strategy}", 0) > 0 and f"plugin:{SIGMOID.name}" not in calls, calls
    assert [h.loss for h in fixed] == pytest.approx([h.loss for h in stock], rel=1e-5)


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA GPU on this machine: a cuda platform's candidate can only train on a GPU where one is present",
)
def test_cuda_platform_trains_the_candidate_on_the_gpu(tmp_path: Path) -> None:
    import ray

    from day0.backends.local.ray import connect
    from day0.model.source import resolve_model
    from day0.spec.pipeline import spec_from_dict
    from day0.steps.trial.train import run_trial

    raw = load_yaml(CONFIGS_DIR / "pipelines" / "tiny-local.yaml")
    raw |= {
        "platform": "h100",
        "storage": f"file://{tmp_path}",
        "trial": {
            "scale": {"layers": 2, "hidden": 64, "experts": 4},
            "steps": 6,
            "seq_len": 32,
            "micro_batch": 2,
            "checkpoint_every": 6,
            "tolerance": {"warmup_steps": 2},
        },
    }
    spec = spec_from_dict(raw)
    ray.shutdown()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    connect(num_cpus=2)
    try:
        assert ray.cluster_resources().get("GPU", 0) >= 1
        result = run_trial(spec, resolve_model(spec.model), checkpoint_uri=f"file://{tmp_path}/ckpt")
    finally:
        ray.shutdown()
    assert result.candidate.device == "cuda" and result.reference.device == "cpu"
    assert not any("no cuda device" in n for n in result.notes), result.notes
    assert len(result.candidate.loss) == 6 and all(x == x for x in result.candidate.loss)


@pytest.fixture(scope="module")
def ascend_checked():
    """Step 2 on the emulated Ascend 910B (no device here) whose library lacks _grouped_mm and two ops
    only real training meets (overrides withdraw them), with the whole reduced-depth model: its op
    checks, layer comparison and training step."""
    from day0.model.source import resolve_model_source
    from day0.steps.operators.checks import run_operators
    from day0.steps.operators.layers import WholeModel
    from tests.fixtures.numerics import ascend_lacking, tiny_inventory

    spec = ascend_lacking("aten::_grouped_mm", "aten::lift_fresh", "aten::mul.out")
    whole = WholeModel(model=resolve_model_source("tiny-deepseek-v3"), keep_layers=[0, 1])
    checked = run_operators(tiny_inventory("bf16"), spec, compute_dtype="bf16", max_elements=1 << 16, whole_model=whole)
    return spec, checked


def test_step_2s_training_step_meets_what_the_capture_cannot_see(ascend_checked) -> None:
    from day0.platforms.kernels import MissingKernelError
    from day0.steps.trial.train import adapted_kernels

    spec, checked = ascend_checked
    step = checked.training_step
    assert step is not None and step.passed and step.error is None, step
    assert {r.quantity for r in step.rows} == {"loss", "gradients", "update"}
    assert step.kernel_calls.get("stock", 0) > 0 and any(k.startswith("adapt:") for k in step.kernel_calls)
    # ops only real training tensors under autocast meet: created tensors, the optimizer's step counter,
    # the fp32 grouped GEMM autocast leaves alone, DDP's bucket averaging
    met = {(a.op, a.dtype) for a in checked.ops.adaptations if a.problem.startswith("missing in the training step")}
    assert {("aten::_grouped_mm", "fp32"), ("aten::lift_fresh", "fp32"), ("aten::mul.out", "fp32")} <= met, met
    assert all(a.strategy for a in checked.ops.adaptations), [a for a in checked.ops.adaptations if not a.strategy]
    assert checked.verdict == "warn", checked.judge().reasons  # adapted missing kernels warn; nothing is wrong

    # without what the training step adapted, the candidate cannot train on the platform
    without = adapted_kernels(
        [a for a in checked.ops.adaptations if not a.problem.startswith("missing in the training step")]
    )
    with pytest.raises(MissingKernelError):
        run_steps(tiny_loop(1, platform=spec, adaptations=without, compute_dtype="bf16"), tiny_data().tokens)


def test_a_kernel_wrong_only_at_trainings_dtype_fails_step_2s_training_step(tmp_path: Path) -> None:
    """The bf16 model's capture runs the embedding at bf16, so the op checks pass a vendor embedding
    wrong at fp32; the trial's fp32 weights call exactly that kernel, and the training step sees it."""
    from day0.model.source import resolve_model_source
    from day0.steps.operators.checks import run_operators
    from day0.steps.operators.layers import WholeModel
    from tests.fixtures.numerics import tiny_inventory

    fault = Fault(
        name="embedding_shifted_fp32",
        layer="numerical",
        description="fp32 embedding reads the next row",
        kernel="tests.fixtures.faulty_kernels:embedding_shifted_fp32",
    )
    saved = os.environ.get("PYTHONPATH")
    install_plugins([fault], tmp_path / "site", [REPO])
    try:
        spec = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "cpu.yaml"))
        spec = spec.model_copy(update={"name": "cpu-shifted-embedding", "vendor_plugin": fault.name})
        whole = WholeModel(model=resolve_model_source("tiny-deepseek-v3"), keep_layers=[0, 1])
        inventory = tiny_inventory("bf16")
        checked = run_operators(inventory, spec, compute_dtype="bf16", max_elements=1 << 16, whole_model=whole)
    finally:
        os.environ.pop("PYTHONPATH") if saved is None else os.environ.update(PYTHONPATH=saved)
    embedding = next(c for c in checked.ops.checks if c.op == "aten::embedding")
    assert embedding.ok and embedding.dtype == "bf16", embedding  # the op check runs what the capture saw
    assert checked.layers is not None and checked.layers.passed  # the bf16 model never calls the fp32 kernel
    step = checked.training_step
    assert step is not None and not step.passed and step.kernel_calls.get(f"plugin:{fault.name}", 0) > 0, step
    assert checked.verdict == "fail"
    assert any(r.startswith("training step (bf16 autocast") and "differ" in r for r in checked.judge().reasons)


@pytest.mark.integration
@pytest.mark.parametrize("sharding", ["ddp", "fsdp"])
def test_emulated_ascend_candidate_trains_on_two_workers(
    ascend_checked, local_ray, sharding: str, tmp_path: Path
) -> None:
    """The candidate on 2 Ray Train workers, DDP and FSDP2, every aten call through the platform's dispatch
    mode with step 2's adaptations: it trains, and its losses are the stock kernels' within bf16 rounding."""
    from day0.steps.trial.ray_train import run_training
    from day0.steps.trial.train import adapted_kernels

    spec, checked = ascend_checked
    stock = _train(compute_dtype="bf16", micro_batch=2)
    loop = tiny_loop(3, platform=spec, adaptations=adapted_kernels(checked.ops.adaptations), compute_dtype="bf16")
    loop = loop.model_copy(update={"sharding": sharding, "micro_batch": 2})
    run = run_training(loop, tiny_data().tokens, name=f"ascend-{sharding}", storage_uri=f"file://{tmp_path}", workers=2)
    assert run.error is None, run.error
    assert len(run.history) == 3
    assert all(h.kernel_calls.get("adapt:cpu_fallback", 0) > 0 for h in run.history), run.history[-1].kernel_calls
    assert [h.loss for h in run.history] == pytest.approx([h.loss for h in stock], rel=1e-3)
