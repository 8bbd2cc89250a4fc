"""The fault matrix: every catalogued fault (tests/data/faults/catalogue.yaml) is caught by the layer
it is labelled with and localised there (the op, the step where the curves part, the slow kernel);
clean runs over 3 seeds raise no alarm; faults of the same kinds that are not in the catalogue are
caught too; and step 5 end to end, through Ray Train, fails on a catalogue vendor plugin.

Budget: the trainings run `day0.steps.trial.loop.run_steps` (the body of the Ray Train worker function)
in-process on a tiny scaled model for 30 steps (in two spawned gloo processes for faults in the
gradient all-reduce), not as Ray Train runs; one end-to-end check goes through `run_trial`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from day0.spec.pipeline import load_yaml
from day0.steps.trial.faults import TrialFaults
from tests.fixtures.paths import DATA, REPO
from testsupport.fault_matrix import Catalogue, Fault, FaultMatrix, install_plugins, run_matrix

pytestmark = pytest.mark.integration  # real Ray clusters / day0 run processes

CATALOGUE = Catalogue.model_validate(load_yaml(DATA / "faults" / "catalogue.yaml"))
UNSEEN = [  # not in the catalogue: same kinds, different faults (tests/data/faults/unseen_faults.py)
    Fault(
        name="silu_as_hardswish",
        layer="numerical",
        description="SiLU as hard-swish",
        kernel="unseen_faults:silu_as_hardswish",
    ),
    Fault(
        name="adamw_update_drops_eps",
        layer="convergence",
        description="the update divides by sqrt(v) + eps - eps",
        kernel="unseen_faults:adamw_update_drops_eps",
    ),
    Fault(
        name="allreduce_one_rank",
        layer="convergence",
        description="each rank keeps its own gradient",
        kernel="unseen_faults:allreduce_one_rank",
        workers=2,
    ),
    Fault(name="loss_scale_0.8", layer="convergence", description="loss x0.8", training=TrialFaults(loss_scale=0.8)),
    Fault(name="lr_x5", layer="convergence", description="learning rate x5", training=TrialFaults(lr_multiplier=5.0)),
]


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    saved = os.environ.get("PYTHONPATH")
    paths = install_plugins(CATALOGUE.faults + UNSEEN, tmp_path_factory.mktemp("site"), [DATA / "faults", REPO])
    yield paths
    os.environ.pop("PYTHONPATH") if saved is None else os.environ.update(PYTHONPATH=saved)


@pytest.fixture(scope="module")
def matrix(plugins: list[str]) -> FaultMatrix:
    return run_matrix(CATALOGUE.faults + UNSEEN)


def _rows(matrix: FaultMatrix, faults: list[Fault]):
    names = {f.name: f for f in faults}
    return [(names[r.fault], r) for r in matrix.rows if r.fault in names]


@pytest.mark.parametrize("faults", [CATALOGUE.faults, UNSEEN], ids=["catalogue", "not-in-catalogue"])
def test_every_fault_caught_by_its_layer_and_localised(matrix: FaultMatrix, faults: list[Fault]) -> None:
    rows = _rows(matrix, faults)
    assert len(rows) == len(faults)
    for fault, row in rows:
        d = row.detection(fault.layer)
        assert d is not None and d.caught, (fault.name, [x.model_dump() for x in row.detections])
        assert d.margin is not None and d.margin > 1, (fault.name, d)
        assert d.localised_at, (fault.name, d)
        if fault.expect_at:  # an op in the list of failing ops, or "step N" where the curves part
            where = d.localised_at.split(", ") if fault.layer != "convergence" else [d.localised_at.split(" (")[0]]
            assert fault.expect_at in where, (fault.name, d.localised_at)


def test_catalogue_covers_every_layer_and_kind(matrix: FaultMatrix) -> None:
    layers = {f.layer for f in CATALOGUE.faults}
    assert layers == {"numerical", "convergence", "performance"}
    assert any(f.training for f in CATALOGUE.faults) and any(f.workers == 2 for f in CATALOGUE.faults)
    # faults only training shows: step 2's per-op check passes them, step 5 does not
    only_training = [r for f, r in _rows(matrix, CATALOGUE.faults) if f.kernel and f.layer == "convergence"]
    assert only_training and all(r.caught_by == ["convergence"] for r in only_training)
    assert matrix.detection_rate == 1.0


def test_clean_runs_raise_no_alarm(matrix: FaultMatrix) -> None:
    trainings = [r for r in matrix.clean if r.fault.startswith("clean, seed")]
    assert len({r.fault.split(" (")[0] for r in trainings}) >= 3  # three seeds
    assert matrix.false_alarms == 0, [(r.fault, r.detections) for r in matrix.clean if r.caught_by]
    for row in matrix.clean:
        for d in row.detections:
            assert d.margin is None or d.margin < 1, (row.fault, d)
    # the clean candidate really differs from its reference (bf16): the comparison is not vacuous
    assert all(
        d.margin is not None and d.margin > 0 for r in trainings for d in r.detections if d.layer == "convergence"
    )
    table = matrix.table()
    assert "| allreduce_sum_not_mean | convergence | convergence | step 1 (grad_norm) |" in table
    assert not any(math.isnan(d.margin or 0) for r in matrix.rows for d in r.detections)


def test_catalogue_vendor_plugin_fails_step_5_through_ray_train(plugins: list[str], tmp_path: Path) -> None:
    """End to end: a platform whose vendor plugin is the catalogue's summing all-reduce, trained by
    `run_trial` on 2 Ray Train workers (DDP over gloo, the plugin's kernels in the workers), fails
    alignment and names where the curves part. The same setup without the plugin aligns: the
    matrix's clean 2-worker row runs the same loop."""
    import ray

    from day0.backends.local.ray import connect
    from day0.model.source import resolve_model
    from day0.paths import CONFIGS_DIR
    from day0.spec.pipeline import spec_from_dict
    from day0.steps.trial.data import prepare_data
    from day0.steps.trial.loop import LoopStep, run_steps
    from day0.steps.trial.model import scale_config
    from day0.steps.trial.result import TrialCurve
    from day0.steps.trial.train import TRIAL_VOCAB, TrialPlan, candidate_loop, run_trial

    raw = load_yaml(CONFIGS_DIR / "pipelines" / "tiny-local.yaml")
    platform = load_yaml(CONFIGS_DIR / "platforms" / "cpu.yaml")
    raw |= {
        "platform": platform | {"name": "cpu-summing-allreduce", "vendor_plugin": "allreduce_sum_not_mean"},
        "storage": f"file://{tmp_path}",
        "trial": {
            "scale": {"layers": 2, "hidden": 64, "experts": 4},
            "steps": 16,
            "workers": 2,
            "seq_len": 32,
            "micro_batch": 2,
            "learning_rate": 3e-3,
            "checkpoint_every": 16,
            "tolerance": {"warmup_steps": 4},
        },
    }
    spec = spec_from_dict(raw)
    model = resolve_model(spec.model)
    # The reference, by the loop run_trial's reference runs (fp32, stock kernels, one worker), stored
    # as a curve so that only the candidate goes through Ray Train.
    data = prepare_data(None, TRIAL_VOCAB)
    cfg = scale_config(
        model.config, spec.trial.scale, vocab_size=data.vocab_size, seq_len=32, eos_token_id=data.eos_token_id
    )
    ref_loop = candidate_loop(spec, cfg, TrialPlan()).model_copy(
        update={"micro_batch": 4, "compute_dtype": "fp32", "platform": None, "device_type": "cpu"}
    )
    ref = [LoopStep.model_validate(h) for h in run_steps(ref_loop, data.tokens)]
    curve = TrialCurve.from_history(ref, "reference cpu-fp32 x1", "cpu", "fp32", workers=1)
    (tmp_path / "reference.json").write_text(curve.model_dump_json())
    trial = spec.trial.model_copy(update={"reference": str(tmp_path / "reference.json")})
    spec = spec.model_copy(update={"trial": trial})

    ray.shutdown()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    connect(num_cpus=2)  # after install_plugins: the workers inherit the plugin on their path
    try:
        result = run_trial(spec, model, checkpoint_uri=f"file://{tmp_path}/ckpt")
    finally:
        ray.shutdown()
    a = result.alignment
    assert result.verdict == "fail" and not a.passed
    assert (a.parted_at_step, a.parted_metric) == (1, "grad_norm") and a.loss_mean_ok and not a.grad_norm_ok
    assert a.noise is not None and a.grad_norm_threshold is not None and a.grad_norm_median_rel_error > 0.9
    cand = result.candidate
    assert cand.workers == 2 and "plugin:allreduce_sum_not_mean" in cand.kernels, cand.kernels
    assert any("kernel table" in n for n in result.notes), result.notes
    assert result.headline["curves part at"] == "step 1 (grad_norm)"
    md = result.to_markdown()
    assert "the curves part at step 1" in md and "seed-to-seed spread" in md
    assert result.files()["loss.png"][:8] == b"\x89PNG\r\n\x1a\n"
