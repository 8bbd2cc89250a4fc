"""Node loss on a local multi-node Ray cluster, for tests and benchmarks only: kill the node hosting a
training worker once a checkpoint exists, and let Ray Train recover. Used by the recovery test and
`make bench`.

Contract: `run_with_node_kill` needs a `ray.cluster_utils.Cluster` the driver is connected to, with
spare nodes offering `resource` (the workers request it, so they never land on the head). It
records the kill in the run's EventLog (`node_killed`), so `results.recoveries` can time the recovery.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from day0.steps.trial.loop import LoopConfig, LoopHooks
from day0.steps.trial.ray_train import TrainingRun, event_log, run_training

__all__ = ["run_with_node_kill"]


def _wait_for(log, predicate, timeout_s: float) -> dict[str, Any]:
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [e for e in ray.get(log.events.remote()) if predicate(e)]
        if found:
            return found[0]
        time.sleep(0.2)
    raise TimeoutError(f"no matching training event within {timeout_s:.0f} s")


def run_with_node_kill(
    cluster,
    loop: LoopConfig,
    tokens,
    *,
    name: str,
    storage_uri: str,
    kill_after_checkpoint_step: int,
    resource: str = "trial_worker",
    max_failures: int = 2,
    timeout_s: float = 600,
    hooks: LoopHooks | None = None,
) -> TrainingRun:
    """Train one worker on `cluster`; after the checkpoint of `kill_after_checkpoint_step` is persisted,
    hard-kill (no graceful shutdown) the node hosting rank 0; return the recovered run."""
    import ray

    log = event_log()
    out: list[TrainingRun | BaseException] = []

    def train() -> None:
        try:
            out.append(
                run_training(
                    loop,
                    tokens,
                    name=name,
                    storage_uri=storage_uri,
                    workers=1,
                    resources_per_worker={"CPU": 1, resource: 1},
                    max_failures=max_failures,
                    log=log,
                    hooks=hooks,
                )
            )
        except BaseException as exc:  # noqa: BLE001 - surfaced in the caller's thread below
            out.append(exc)

    thread = threading.Thread(target=train, name=f"train-{name}", daemon=True)
    thread.start()
    started = _wait_for(log, lambda e: e["kind"] == "started" and e.get("rank") == 0, timeout_s)
    _wait_for(
        log, lambda e: e["kind"] == "checkpoint" and (e.get("step") or 0) >= kill_after_checkpoint_step, timeout_s
    )
    victim = next(n for n in cluster.list_all_nodes() if n.node_id == started["node_id"])
    if victim is cluster.head_node:
        raise RuntimeError("the training worker runs on the head node; give workers a resource only spare nodes have")
    ray.get(
        log.record.remote(
            "node_killed", node_id=victim.node_id, detail=f"remove_node(allow_graceful=False) of {victim.node_id[:12]}"
        )
    )
    cluster.remove_node(victim, allow_graceful=False)
    thread.join(timeout_s)
    if not out:
        raise TimeoutError(f"training did not finish within {timeout_s:.0f} s after the node kill")
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]
