"""Step 2's cluster path: the same entrypoint as one Ray task (a local Ray with one CPU), and the
accelerator request it makes for GPU and custom-resource pools."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from day0.backends.resources import task_options, train_worker_resources
from day0.spec.cluster import Accelerator, ClusterSpec, NodePool
from day0.steps.operators.job import OperatorsRequest, main, run_operators_on_ray
from tests.fixtures.numerics import cpu_spec, tiny_inventory

OPS = {"aten::mm", "aten::_safe_softmax", "aten::histc"}


def _request() -> OperatorsRequest:
    inv = tiny_inventory("fp32")
    small = inv.model_copy(update={"ops": [r for r in inv.ops if r.op in OPS]})
    return OperatorsRequest(inventory=small, platform=cpu_spec(), compute_dtype="bf16")


def test_accelerator_options() -> None:
    assert task_options(cpu_spec()) == {"num_cpus": 1}
    assert task_options(cpu_spec(device_type="cuda"))["num_gpus"] == 1
    pool = NodePool(
        name="npu", nodes=2, accelerator=Accelerator(resource="huawei.com/Ascend910", per_node=8, memory_gib=64)
    )
    npus = ClusterSpec(backend="kuberay", node_pools=[pool])
    opts = task_options(cpu_spec(device_type="npu"), npus)
    assert opts["resources"] == {"Ascend910": 1} and "num_gpus" not in opts
    # On a KubeRay cluster the pool's accelerator decides, even for a CPU-only platform's trial workers
    assert train_worker_resources(cpu_spec(), npus) == {"CPU": 1, "Ascend910": 1}
    assert train_worker_resources(cpu_spec()) is None  # local: Ray Train's own default


def test_job_entrypoint_reads_and_writes_json(tmp_path: Path) -> None:
    req, res = tmp_path / "req.json", tmp_path / "res.json"
    req.write_text(_request().model_dump_json())
    assert main([str(req), str(res)]) == 0
    result = json.loads(res.read_text())
    assert {c["op"] for c in result["ops"]["checks"]} == OPS
    assert main([]) == 2


@pytest.mark.integration
def test_runs_as_one_ray_task() -> None:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.shutdown()  # a Ray left connected by a test before this one on the worker (as `local_ray` does)
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        result = run_operators_on_ray(_request())
    finally:
        ray.shutdown()
    assert {c.op for c in result.ops.checks} == OPS
    assert result.passed  # histc adapted (upcast) inside the worker
    assert [a.strategy for a in result.ops.adaptations] == ["upcast"]
