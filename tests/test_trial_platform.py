"""The candidate trains on the platform: under its kernel table with step 2's adaptations applied (the
loop run bare, as a Ray Train worker runs it), and on the GPU for a `cuda` platform when one is here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from day0.paths import CONFIGS_DIR
from day0.spec import PlatformSpec, load_yaml
from day0.testing.fault_matrix import Fault, install_plugins
from day0.trial.loop import StepRecord, run_steps
from tests._trial_helpers import tiny_data, tiny_loop

DATA = Path(__file__).parent / "data"
SIGMOID = Fault(
    name="sigmoid_wrong_fp32",
    layer="numerical",
    description="sigmoid via a low-order exp, fp32 only",
    kernel="faulty_kernels:sigmoid_wrong_fp32",
)


@pytest.fixture(scope="module")
def vendor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlatformSpec]:
    """The CPU platform whose vendor plugin (installed as an entry point) has a wrong fp32 sigmoid."""
    saved = os.environ.get("PYTHONPATH")
    install_plugins([SIGMOID], tmp_path_factory.mktemp("site"), [DATA / "numerics"])
    spec = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "cpu.yaml"))
    yield spec.model_copy(update={"name": "cpu-wrong-sigmoid", "vendor_plugin": SIGMOID.name})
    os.environ.pop("PYTHONPATH") if saved is None else os.environ.update(PYTHONPATH=saved)


def _train(**update) -> list[StepRecord]:
    return [StepRecord.model_validate(h) for h in run_steps(tiny_loop(3, **update), tiny_data().tokens)]


def test_candidate_runs_the_vendor_kernels_and_step_2s_adaptations(vendor: PlatformSpec) -> None:
    from day0.numerics.step import run_operators
    from day0.trial.step import adapted_kernels
    from tests.data.numerics.numerics_fixtures import tiny_inventory

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

    from day0.backends.local import connect
    from day0.core.model_source import resolve_model
    from day0.spec import spec_from_dict
    from day0.trial.step import run_trial

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
