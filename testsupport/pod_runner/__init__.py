"""A process kubelet for the test control plane: Nodes whose pods run as real local processes.

kwok's pods run nothing; `PodRunner` registers Nodes of its own beside kwok's and runs the pods
bound to them (KubeRay's `ray start`, init containers, probes, the autoscaler) as process trees
under `unshare`, so e2e tests exercise real Ray on a real API server. See docs/development/testing.md,
"The pod runner", for what it emulates and what it does not.

    from testsupport.pod_runner import PodRunner, Pool
    with PodRunner(api_client, pools=[Pool(name="ray", count=3, resources={"day0.io/accel": 1})]) as runner:
        ...  # pods scheduled onto ray-0..ray-2 run; runner.delete_node("ray-1") kills its pods
    cluster = ClusterSpec.model_validate(process_backed({...}))  # a RayCluster spec that runs real Ray here

    python -m testsupport.pod_runner --kubeconfig K --pool ray:3:day0.io/accel=1   # standalone

Run it from the checkout (`testsupport` is test scaffolding, not part of the installed product).

Modules: `nodes` (Node manifests, pools, taints), `node_api` (heartbeats, Leases, waiting on
Nodes), `expand` (env and `$(VAR)`), `api_source` (ConfigMaps, Secrets, tokens), `volumes`,
`sandbox` (the process tree of one container), `probes`, `container` (one container's runtime
record), `pod_status` (phase, conditions), `pod` (one pod's life), `host` (what a pod needs from
its runner), `service_dns` (each pod's /etc/hosts), `lifetime` (nothing outlives a runner),
`runner`, and `raycluster` (`process_backed`: the spec options a RayCluster needs to run real Ray here).
"""

from testsupport.pod_runner.nodes import RUNNER_LABEL, Pool, parse_pool
from testsupport.pod_runner.raycluster import process_backed
from testsupport.pod_runner.runner import PodRunner
from testsupport.pod_runner.sandbox import MARK, marked_processes

__all__ = ["MARK", "RUNNER_LABEL", "PodRunner", "Pool", "marked_processes", "parse_pool", "process_backed"]
