"""The `kuberay` backend: one RayCluster per run on Kubernetes GPU node pools, through KubeRay.

Modules, one concern each (import from them; nothing is re-exported here, so the pure builder
stays importable without the kubernetes client):
- `manifest`: the RayCluster dict from the cluster spec's node pools and the plan (pure).
- `status`: readers of API objects (readiness from conditions, why a pod is Pending) and the
  shared vocabulary: `ClusterError`, `ClusterEvent`, `PoolReport`.
- `watching`: `ResourceWatch`, list-then-watch resumed by resourceVersion, relisted on 410 Gone.
- `monitor`: `ClusterMonitor`, the failure watcher (pods, nodes, events) that recovers lost pods.
- `lifecycle`: `KubeRayCluster` (create, wait Ready, run jobs, delete), `raycluster_session`,
  `delete_run_clusters`.
Job submission to the head is `day0.backends.jobs`, shared with the local backend.
"""

__all__: list[str] = []
