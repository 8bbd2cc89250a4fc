"""Benchmark: a 4,096-node fake GPU cluster (kwok); time for a 2,048-worker RayCluster to be
scheduled and Ready through the real API server, scheduler and KubeRay operator.

    .venv/bin/python -m benchmarks.bench_kuberay          # brings the control plane up if needed

`run()` returns the numbers (seconds) for benchmarks/run.py to collect.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["run"]

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "k8s"
POOL = "bench-gpu"


def _fake_nodes() -> Any:
    spec = importlib.util.spec_from_file_location("fake_nodes", K8S / "fake_nodes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    kubectl = subprocess.run(
        ["bash", "-c", f"source {K8S}/env.sh; echo $KUBECTL_BIN/kubectl"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, *args], input=stdin, check=True, capture_output=True, text=True
    ).stdout


def _wait_nodes(core: Any, count: int, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        nodes = core.list_node(label_selector=f"day0.io/pool={POOL}").items
        ready = sum(any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []) for n in nodes)
        if ready >= count:
            return
        time.sleep(2)
    raise TimeoutError(f"only {ready}/{count} fake nodes Ready after {timeout_s} s")


def run(nodes: int = 4096, workers: int = 2048, gpus_per_node: int = 8, timeout_s: float = 1800) -> dict[str, Any]:
    """Create `nodes` fake GPU nodes, a RayCluster of `workers` one-node workers; time it; clean up
    (the control plane too, if this call started it)."""
    from kubernetes import config

    kubeconfig = subprocess.run(
        [str(K8S / "e2e-up.sh"), "--kubeconfig"], check=True, capture_output=True, text=True
    ).stdout.strip()
    was_up = _healthy(kubeconfig)
    subprocess.run([str(K8S / "e2e-up.sh")], check=True, capture_output=True, timeout=7200)
    try:
        return _measure(config.new_client_from_config(kubeconfig), kubeconfig, nodes, workers, gpus_per_node, timeout_s)
    finally:
        if not was_up:  # leave the machine as we found it
            subprocess.run([str(K8S / "e2e-down.sh")], check=False, capture_output=True, timeout=300)


def _healthy(kubeconfig: str) -> bool:
    from kubernetes import client, config

    try:
        client.VersionApi(config.new_client_from_config(kubeconfig)).get_code(_request_timeout=5)
        return True
    except Exception:  # noqa: BLE001 - any failure to reach the API server means "not healthy"
        return False


def _measure(
    api: Any, kubeconfig: str, nodes: int, workers: int, gpus_per_node: int, timeout_s: float
) -> dict[str, Any]:
    from kubernetes import client

    from day0.backends.kuberay.lifecycle import KubeRayCluster
    from day0.backends.kuberay.manifest import build_raycluster
    from day0.backends.kuberay.status import raycluster_ready
    from day0.spec.cluster import ClusterSpec

    core = client.CoreV1Api(api)
    items = _fake_nodes().pool_nodes(
        POOL, nodes, resource="nvidia.com/gpu", per_node=gpus_per_node, taints=["nvidia.com/gpu=present:NoSchedule"]
    )
    t0 = time.monotonic()
    _kubectl(
        kubeconfig,
        "apply",
        "--server-side",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    )
    _wait_nodes(core, nodes)
    nodes_s = time.monotonic() - t0
    cluster = ClusterSpec.model_validate(
        {
            "backend": "kuberay",
            "namespace": "day0",
            "node_pools": [
                {
                    "name": "gpu",
                    "accelerator": {"resource": "nvidia.com/gpu", "per_node": gpus_per_node, "memory_gib": 80},
                    "nodes": nodes,
                    "node_selector": {"day0.io/pool": POOL},
                }
            ],
        }
    )
    rc = KubeRayCluster(
        build_raycluster(
            cluster, f"bench-{os.getpid()}", workers={"gpu": workers}, head_node_selector={"day0.io/role": "cpu"}
        ),
        api_client=api,
    )
    result: dict[str, Any] = {"nodes": nodes, "workers": workers, "node_setup_s": round(nodes_s, 2)}
    try:
        t0 = time.monotonic()
        rc.create()
        scheduled_s = None
        while time.monotonic() - t0 < timeout_s:
            pods = rc.pods()
            if scheduled_s is None and len(pods) == workers + 1 and all(p.spec.node_name for p in pods):
                scheduled_s = time.monotonic() - t0
            if raycluster_ready(rc.get(), rc.desired_workers()):
                break
            time.sleep(1.0)
        else:
            raise TimeoutError(f"not Ready after {timeout_s} s: {[str(r) for r in rc.pool_reports()]}")
        result.update(
            scheduled_s=round(scheduled_s or time.monotonic() - t0, 2), ready_s=round(time.monotonic() - t0, 2)
        )
    finally:
        t0 = time.monotonic()
        rc.delete(timeout_s=600)
        result["teardown_s"] = round(time.monotonic() - t0, 2)
        _kubectl(kubeconfig, "delete", "nodes", "-l", f"day0.io/pool={POOL}", "--wait=false")
    return result


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
