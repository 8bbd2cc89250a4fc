"""Benchmark: time from RayCluster creation to a job's first step with real Ray processes in the pods
(the pod runner's process-backed Nodes beside kwok, the real API server, scheduler and KubeRay
operator): created -> Ready, Ready -> job submitted and its first output line, and teardown.

    .venv/bin/python -m benchmarks.bench_kuberay_pods     # brings the control plane up if needed

The job's "first step" is a Ray task on a worker printing a line, so the figure is the platform
overhead a step pays before it computes, not the step's own work.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["run"]

K8S = Path(__file__).resolve().parents[1] / "k8s"
FIRST_STEP = (
    "import ray; ray.init(); "
    "print('first step on', ray.get(ray.remote(num_cpus=1, resources={'accel': 1})"
    "(lambda: ray.util.get_node_ip_address()).remote()), flush=True)"
)


def run(workers: int = 1) -> dict[str, Any]:
    from kubernetes import config

    from day0.backends.jobs import job_client, submit
    from day0.backends.kuberay.lifecycle import KubeRayCluster, delete_run_clusters
    from day0.backends.kuberay.manifest import build_raycluster
    from day0.spec.cluster import ClusterSpec
    from testsupport.pod_runner import PodRunner, Pool, process_backed

    kubeconfig = subprocess.run(
        [str(K8S / "e2e-up.sh"), "--kubeconfig"], check=True, capture_output=True, text=True
    ).stdout.strip()
    subprocess.run([str(K8S / "e2e-up.sh")], check=True, capture_output=True, timeout=7200)
    api = config.new_client_from_config(kubeconfig)
    prefix = f"bench{os.getpid() % 1000}"
    pools = [
        Pool(name=f"{prefix}-head", count=1, cpus=4, memory_gib=16),
        Pool(name=f"{prefix}-work", count=workers, cpus=2, memory_gib=4, resources={"day0.io/accel": 1}),
    ]
    acc = {"resource": "day0.io/accel", "per_node": 1, "memory_gib": 16}
    cluster = ClusterSpec.model_validate(
        process_backed(
            {
                "backend": "kuberay",
                "namespace": "day0",
                "dashboard_via": "pod-ip",
                "head": {"node_selector": {"day0.io/pool": f"{prefix}-head"}, "cpus": 2, "memory_gib": 4},
                "node_pools": [
                    {
                        "name": f"w{i}",
                        "accelerator": acc,
                        "nodes": 1,
                        "cpus_per_node": 2,
                        "memory_gib_per_node": 2,
                        "node_selector": {"day0.io/pool": f"{prefix}-work"},
                    }
                    for i in range(workers)
                ],
            }
        )
    )
    out: dict[str, Any] = {"workers": workers}
    with PodRunner(api, pools, max_grace_s=5.0) as _runner:
        rc = KubeRayCluster(build_raycluster(cluster, f"{prefix} bench"), api_client=api)
        t0 = time.monotonic()
        try:
            rc.create()
            out["created_to_ready_s"] = round(rc.wait_ready(300), 1)
            client = job_client(rc.dashboard_address("pod-ip"))
            job = submit(client, f"python -c {FIRST_STEP!r}")
            while "first step on" not in str(client.get_job_logs(job)):
                if str(client.get_job_status(job)) in ("FAILED", "STOPPED", "JobStatus.FAILED"):
                    raise RuntimeError(f"job failed: {client.get_job_logs(job)[-2000:]}")
                time.sleep(0.2)
            out["created_to_first_step_s"] = round(time.monotonic() - t0, 1)
            out["ready_to_first_step_s"] = round(out["created_to_first_step_s"] - out["created_to_ready_s"], 1)
        finally:
            t1 = time.monotonic()
            rc.delete()
            out["teardown_s"] = round(time.monotonic() - t1, 1)
            delete_run_clusters("day0", f"{prefix} bench", api_client=api)
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
