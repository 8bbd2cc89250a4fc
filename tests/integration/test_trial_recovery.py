"""Node-failure recovery: on a 3-node local Ray cluster, hard-killing the node that hosts the training
worker mid-run makes Ray Train resume from the last checkpoint on the spare node, and the final loss
equals an uninterrupted run's (deterministic setup: fixed seed, data order by step, one thread)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from day0.steps.trial.faults import TrialFaults
from day0.steps.trial.loop import LoopStep, run_steps
from day0.steps.trial.result import recoveries
from tests.fixtures.trial import tiny_data, tiny_loop

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        c.add_node(num_cpus=1, resources={"trial_worker": 1})
    ray.init(address=c.address, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def test_node_kill_recovers_with_identical_final_loss(cluster, tmp_path: Path) -> None:
    from testsupport.chaos import run_with_node_kill

    steps = 12
    loop = tiny_loop(steps, checkpoint_every=4)
    run = run_with_node_kill(
        cluster,
        loop,
        tiny_data().tokens,
        name="killed",
        storage_uri=f"file://{tmp_path}",
        kill_after_checkpoint_step=4,
        hooks=TrialFaults(step_delay_s=0.4),
    )
    assert run.error is None
    starts = run.starts
    assert len(starts) == 2 and starts[1].from_step >= 4 and starts[1].node_id != starts[0].node_id
    killed = next(e for e in run.events if e.kind == "node_killed")
    assert killed.node_id == starts[0].node_id
    [rec] = recoveries(run.events)
    assert rec.failed_at == killed.time and rec.resumed_from_step == starts[1].from_step and rec.recovery_s > 0

    uninterrupted = [LoopStep.model_validate(h) for h in run_steps(tiny_loop(steps), tiny_data().tokens)]
    assert [h.step for h in run.history] == list(range(1, steps + 1))
    assert run.history[-1].loss == pytest.approx(uninterrupted[-1].loss, abs=1e-6)
