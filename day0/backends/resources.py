"""What one accelerator worker asks Ray for: shared by step 2's Ray task and step 5's Train workers.

Why here: the answer depends on the platform and on the cluster's node pools, not on the step, and
the step packages must not import each other. The Kubernetes resource is the first node pool's on
KubeRay, else the platform file's own (`platform.resource`; nvidia.com/gpu for cuda when omitted).
NVIDIA's `nvidia.com/gpu` is Ray's `GPU`; other accelerators are custom Ray resources named after the
last part of the Kubernetes resource (`huawei.com/Ascend910` -> `Ascend910`, as
`day0.backends.kuberay.manifest` advertises them); a CPU platform on a local Ray asks for one CPU.
"""

from __future__ import annotations

from day0.backends.jobs import DriverPlacement
from day0.spec.cluster import ClusterSpec, PlatformSpec

__all__ = ["DRIVER_RESOURCE", "accelerator_resource", "driver_placement", "task_options", "train_worker_resources"]

# A custom Ray resource every KubeRay worker advertises once (and the head never): a job's driver asks
# for it, so it runs on a worker pod, never on the head, without taking a CPU or an accelerator that the
# step's own tasks and Train workers need.
DRIVER_RESOURCE = "day0_driver"


def accelerator_resource(platform: PlatformSpec, cluster: ClusterSpec | None = None) -> str | None:
    """The Ray resource one accelerator is counted in (`GPU`, a custom name), or None for CPU-only."""
    pools = cluster.node_pools if cluster is not None and cluster.backend == "kuberay" else []
    resource = pools[0].accelerator.resource if pools else platform.accelerator()
    if resource in (None, "cpu"):
        return None
    if resource == "nvidia.com/gpu":
        return "GPU"
    return resource.split("/")[-1]


def task_options(platform: PlatformSpec, cluster: ClusterSpec | None = None) -> dict[str, object]:
    """`ray.remote(...).options(**...)` for a task that needs one accelerator worker."""
    resource = accelerator_resource(platform, cluster)
    if resource is None:
        return {"num_cpus": 1}
    if resource == "GPU":
        return {"num_cpus": 1, "num_gpus": 1}
    return {"num_cpus": 1, "resources": {resource: 1}}


def train_worker_resources(platform: PlatformSpec, cluster: ClusterSpec | None = None) -> dict[str, float] | None:
    """Ray Train `resources_per_worker` (None: Ray Train's default of one CPU, plus a GPU with use_gpu)."""
    resource = accelerator_resource(platform, cluster)
    if resource is None or resource == "GPU":
        return None
    return {"CPU": 1, resource: 1}


def driver_placement(platform: PlatformSpec, cluster: ClusterSpec, uses_accelerator: bool) -> DriverPlacement:
    """Where a step's job driver runs on a RayCluster: a worker's driver slot, plus one accelerator
    when the driver itself works on one (step 6's server)."""
    resources: dict[str, float] = {DRIVER_RESOURCE: 1}
    placement: DriverPlacement = {}
    resource = accelerator_resource(platform, cluster) if uses_accelerator else None
    if resource == "GPU":
        placement["entrypoint_num_gpus"] = 1
    elif resource is not None:
        resources[resource] = 1
    placement["entrypoint_resources"] = resources
    return placement
