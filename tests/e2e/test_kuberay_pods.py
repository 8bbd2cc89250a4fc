"""`day0 run` on the kuberay backend with real Ray in the pods (the pod runner's process-backed
Nodes), results in the test's real S3 server:

1. the flow creates the run's RayCluster through the API, runs step 2 and step 5 as Ray jobs on
   its workers, the trial asks for more accelerator workers than the fixed pool holds so KubeRay's
   in-tree autoscaler grows the elastic pool, and at the end the cluster, its pods and their
   processes are gone;
2. the same trial with a worker's Node deleted mid-run: the monitor records the loss, KubeRay
   replaces the pod, Ray Train resumes from the last checkpoint in S3, and the final loss equals the
   uninterrupted run's.

The pod runner gives each worker group one node's worth of ports (its pods share this machine's
network), so "a pool of 3 nodes" is three runner Nodes behind one node selector, used by a fixed
one-node group and an elastic group of at most one node (see k8s/README.md, "The pod runner").
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from day0.runs import RunContext
from day0.spec import spec_from_dict
from tests.e2e._day0_run import Day0Run
from testsupport.pod_runner import PodRunner, Pool, process_backed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
ACCEL = {"resource": "day0.io/accel", "per_node": 1, "memory_gib": 16}  # the planner's figure
TRIAL = {
    "scale": {"layers": 2, "hidden": 64, "experts": 4},
    "steps": 12,
    "seq_len": 32,
    "micro_batch": 2,
    "checkpoint_every": 4,
    "workers": 2,
}


def pipeline(name: str, prefix: str, bucket: str) -> tuple[dict[str, Any], str]:
    cluster = process_backed(
        {
            "backend": "kuberay",
            "namespace": "day0",
            "ready_timeout_s": 240,
            "job_timeout_s": 600,
            "dashboard_via": "pod-ip",
            "store_secret": STORE_SECRET,  # the pods' store credentials (never the jobs' runtime env)
            "head": {"node_selector": {"day0.io/pool": f"{prefix}-head"}, "cpus": 2, "memory_gib": 4},
            "node_pools": [
                {
                    "name": name_,
                    "accelerator": ACCEL,
                    "cpus_per_node": 2,
                    "memory_gib_per_node": 2,
                    "node_selector": {"day0.io/pool": f"{prefix}-work"},
                    **size,
                }
                for name_, size in (("fixed", {"nodes": 1}), ("elastic", {"elastic": {"min": 0, "max": 1}}))
            ],
        }
    )
    raw = {
        "metadata": {"name": name},
        "model": "tiny-deepseek-v3",
        "platform": "cpu",
        "cluster": cluster,
        "training": {"seq_len": 64, "global_batch": 4, "micro_batch": 2, "precision": {"compute": "bf16"}},
        "validation": {"reference_dtype": "fp64"},
        "trial": TRIAL,
        "storage": f"s3://{bucket}/{name}",
    }
    return raw, RunContext.create(spec_from_dict(raw)).run_id


STORE_SECRET = "day0-e2e-store"


@pytest.fixture(autouse=True)
def store_secret(api: Any, s3_server: Any) -> Any:
    """The S3 test server's credentials as the Secret the Ray pods read (cluster.store_secret)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    keys = {"access-key-id": s3_server.access_key, "secret-access-key": s3_server.secret_key}
    try:
        core.create_namespaced_secret("day0", {"metadata": {"name": STORE_SECRET}, "stringData": keys})
    except client.exceptions.ApiException as exc:
        if exc.status != 409:  # left by an earlier test of this module: the same values
            raise
    yield
    core.delete_namespaced_secret(STORE_SECRET, "day0")


@pytest.fixture
def runner(pod_runner: Any) -> tuple[PodRunner, str]:
    """A head Node and three accelerator Nodes running real processes; their pool-label prefix."""
    started = pod_runner(
        Pool(name="head", count=1, cpus=4, memory_gib=16),
        Pool(name="work", count=3, cpus=2, memory_gib=4, resources={"day0.io/accel": 1}),
    )
    return started, pod_runner.prefix


@pytest.fixture
def api_url(prefect_server: None) -> str:
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


def day0_run(tmp_path: Path, raw: dict[str, Any], run_id: str, api_url: str, api: Any, **env: str) -> Day0Run:
    spec = tmp_path / f"{raw['metadata']['name']}.yaml"
    spec.write_text(yaml.safe_dump(raw))
    return Day0Run(spec, "operators,trial", api_url=api_url, api=api, run_id=run_id, home=tmp_path / "prefect", **env)


def stored(s3: Any, bucket: str, raw: dict[str, Any], run_id: str, *key: str) -> dict[str, Any]:
    name = raw["metadata"]["name"]
    path = "/".join((name, "runs", name, run_id, *key))
    return dict(json.loads(s3.get_object(Bucket=bucket, Key=path)["Body"].read()))


def assert_all_gone(run: Day0Run, runner: PodRunner) -> None:
    from day0.backends.kuberay.lifecycle import delete_run_clusters

    assert run.pods() == [], [p.metadata.name for p in run.pods()]
    assert delete_run_clusters("day0", run.run_id, api_client=run.api) == []  # nothing left to sweep
    deadline = time.monotonic() + 30
    while runner.processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert runner.processes() == [], "Ray processes left in the pods"


_UNINTERRUPTED: dict[str, Any] = {}


def test_day0_run_creates_uses_autoscales_and_deletes_its_raycluster(
    tmp_path: Path, api: Any, runner: tuple[PodRunner, str], s3_server: Any, api_url: str
) -> None:
    nodes, prefix = runner
    raw, run_id = pipeline("kr-pods", prefix, s3_server.bucket)
    with day0_run(tmp_path, raw, run_id, api_url, api) as run:
        rc = run.finish()
        out = run.output
        assert rc == 0, out[-8000:]
    assert "cluster: created RayCluster" in out and "Ready in" in out, out[-4000:]
    assert "cluster: deleting RayCluster" in out
    # step 2 ran on the fixed worker; step 5's two workers needed the elastic pool: the autoscaler grew it
    assert {"fixed", "elastic"} <= run.groups, run.groups
    s3 = s3_server.client()
    ops = stored(s3, s3_server.bucket, raw, run_id, "operators", "result.json")
    trial = stored(s3, s3_server.bucket, raw, run_id, "trial", "result.json")
    for result in (ops, trial):
        execution = result["execution"]
        assert execution["backend"] == "kuberay" and execution["job_id"].startswith("day0-"), execution
    assert ops["verdict"] in ("pass", "warn") and trial["verdict"] == "pass", (ops["reasons"], trial["reasons"])
    assert trial["candidate"]["workers"] == 2 and len(trial["candidate"]["loss"]) == TRIAL["steps"]
    assert all(m["estimate_bytes"] for m in trial["memory"])  # step 3's estimate beside the measured peaks
    assert_all_gone(run, nodes)
    _UNINTERRUPTED["loss"] = trial["candidate"]["loss"]


def test_a_node_lost_mid_trial_resumes_from_its_checkpoint_on_a_replacement_pod(
    tmp_path: Path, api: Any, runner: tuple[PodRunner, str], s3_server: Any, api_url: str
) -> None:
    if "loss" not in _UNINTERRUPTED:
        pytest.fail("needs the uninterrupted run of the previous test (run the module, not this test alone)")
    nodes, prefix = runner
    raw, run_id = pipeline("kr-pods-loss", prefix, s3_server.bucket)
    s3, name = s3_server.client(), raw["metadata"]["name"]
    checkpoints = f"{name}/runs/{name}/{run_id}/trial/checkpoints/candidate/"
    faults = json.dumps({"step_delay_s": 2.0})  # slow steps: the node goes while the candidate trains
    with day0_run(tmp_path, raw, run_id, api_url, api, DAY0_TRIAL_FAULTS=faults) as run:
        run.wait_for(
            "a candidate checkpoint",
            lambda: any(
                "/step_" in o["Key"]
                for o in s3.list_objects_v2(Bucket=s3_server.bucket, Prefix=checkpoints).get("Contents", [])
            ),
        )
        time.sleep(3 * 2.0)  # three slow steps: the checkpoint's upload is complete and reported
        victim = next(p for p in run.pods() if p.metadata.labels.get("ray.io/group") == "fixed")
        nodes.delete_node(victim.spec.node_name)
        rc = run.finish()
        out = run.output
        assert rc == 0, out[-8000:]
    trial = stored(s3, s3_server.bucket, raw, run_id, "trial", "result.json")
    kinds = [e["kind"] for e in trial["execution"]["events"]]
    assert "node-lost" in kinds and "pod-replaced" in kinds, kinds
    assert trial["recoveries"] and trial["recoveries"][0]["resumed_from_step"] >= TRIAL["checkpoint_every"]
    assert trial["candidate"]["loss"][-1] == pytest.approx(_UNINTERRUPTED["loss"][-1], abs=1e-6)
    assert_all_gone(run, nodes)
