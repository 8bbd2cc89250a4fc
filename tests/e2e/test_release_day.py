"""Release day on the installed service, end to end (issue 23), every pod a real process (the pod runner):

1. `helm install`: the Prefect server, the Kubernetes worker (its init containers register the work
   pool, the deployments and the recovery automation) and the webhook receiver run as pods.
2. A Hugging Face release delivery POSTed to the receiver's Service (twice: the hub retries) makes
   exactly one flow run; the worker submits it as a Job in the runs namespace; the Job's pod runs the
   flow, which creates the run's RayCluster there; steps 2, 5 and 6 run as Ray jobs whose drivers are
   on worker pods, never the head; results and the report land in the S3 test server; the RayCluster is
   deleted; the flow run is Completed, with an artifact linking the report.
3. The store's secret is nowhere in the Ray dashboard's job API, the pods' specs or any pod process's
   command line.
4. `helm upgrade` raises the elastic pool's maximum: the next run's RayCluster asks for it.
5. `make drill` only (marker `drill`, about 8 min here): that next run loses its flow-run pod's node
   mid-trial: the observer marks it Crashed, the recovery automation reschedules it, the worker runs it
   again on the other flow node, the dead attempt's RayCluster is swept by run id, the completed steps
   are reused, the trial resumes from its last checkpoint and ends on the uninterrupted run's final loss
   (within 1e-6). `make test` covers that path in parts: a run whose worker and processes died is
   Crashed and rescheduled by the recovery automation (tests/integration/test_zombie_runs.py), a chart
   upgrade (tests/e2e/test_helm.py::test_install_upgrade_uninstall), a run's leftover RayCluster swept
   by its run id (tests/e2e/test_kuberay_e2e.py), a rerun reusing completed steps
   (tests/integration/test_adapt_flow.py) and the trial's task rerun resuming from its S3 checkpoint
   (tests/integration/test_trial_run.py::test_task_rerun_resumes_from_s3_checkpoint).
6. `make drill` only (about 6 min here): a third run loses a Ray worker's node mid-trial
   (slowed by a fault drill set through the chart's flow-run env): the monitor records the loss, KubeRay
   replaces the pod, Ray Train resumes from the last checkpoint in S3 (or the job is submitted again when
   the node held its driver), and the final loss is again the uninterrupted run's. `make test` covers
   that path in parts: a lost worker node's pod replaced and rejoining Ray (test_pod_runner.py), a node
   lost during a KubeRay job in the result (test_kuberay_e2e.py), Ray Train's resume after a node kill
   with the same final loss (tests/integration/test_trial_recovery.py) and the resubmission of a job
   whose driver was lost (tests/unit/backends/test_session.py).

`DAY0_RELEASE_DAY_TIMINGS=<file>` writes the drill's timings there (`make bench`: bench_release_day).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from day0.backends.kuberay.lifecycle import KubeRayCluster
from tests.e2e._service import ORG, PREFECT_AUTH, TRIAL, Service, hub_snapshot

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2700)]
REPO_NAME = f"{ORG}/tiny-deepseek-v3"
TRIAL_CHECKPOINT_EVERY = int(TRIAL["checkpoint_every"])
_UNINTERRUPTED: dict[str, Any] = {}


def new_sha() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def service(api: Any, s3_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    from testsupport.pod_runner import PodRunner, Pool, marked_processes

    prefix = f"rd{os.getpid() % 1000}"
    runner = PodRunner(
        api,
        [
            Pool(name=f"{prefix}-ctl", count=1, cpus=8, memory_gib=16),  # Prefect server, worker, receiver
            Pool(name=f"{prefix}-flow", count=2, cpus=4, memory_gib=8),  # flow-run pods (one is lost in test 2)
            Pool(name=f"{prefix}-head", count=1, cpus=4, memory_gib=16),
            Pool(name=f"{prefix}-work", count=3, cpus=2, memory_gib=4, resources={"day0.io/accel": 1}),
        ],
        max_grace_s=5.0,
        backoff_s=1.0,
        max_backoff_s=5.0,
    ).start()
    tmp = tmp_path_factory.mktemp("release-day")
    hub = Path(tempfile.mkdtemp(prefix="day0-drill-hub-", dir="/var/tmp"))  # every pod has a /tmp of its own
    svc = Service(api, runner, prefix, f"rd-{uuid.uuid4().hex[:6]}", s3_server, hub)
    try:
        svc.install(tmp / "values.yaml")
        yield svc
    finally:
        try:
            svc.uninstall()
        finally:
            runner.stop()
            shutil.rmtree(hub, ignore_errors=True)
        left = marked_processes(lambda m: m.startswith(f"{runner.runner_id}/"))
        assert not left, f"pod runner processes left behind: {left}"


class Watch:
    """What a person would check while the run goes, sampled every 2 s: the runs namespace's RayClusters
    (spec, when Ready), the Ray jobs their heads report (driver node, entrypoint, runtime env, metadata)
    and where the store's secret shows up (job API, pod specs, pod processes' command lines)."""

    def __init__(self, service: Service, secret: str) -> None:
        self.service, self.secret = service, secret
        self.clusters: dict[str, dict[str, Any]] = {}
        self.ready_at: dict[str, float] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.heads: set[str] = set()  # Ray node ids of heads
        self.groups: set[str] = set()  # worker groups seen with a Running pod
        self.leaks: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.wait(2):
            with contextlib.suppress(Exception):  # a sample lost to a pod coming or going: the next one counts
                self._sample()

    def _sample(self) -> None:
        svc = self.service
        for rc in svc.rayclusters():
            name = rc["metadata"]["name"]
            self.clusters.setdefault(name, rc)
            if rc.get("status", {}).get("state") == "ready":
                self.ready_at.setdefault(name, time.monotonic())
            workers = svc.pods(svc.runs, f"ray.io/cluster={name},ray.io/node-type=worker")
            self.groups |= {p.metadata.labels["ray.io/group"] for p in workers if p.status.phase == "Running"}
            heads = svc.pods(svc.runs, f"ray.io/cluster={name},ray.io/node-type=head")
            for head in [p for p in heads if p.status.pod_ip]:  # the job API wants the cluster's Ray token
                token = KubeRayCluster.attach(name, svc.runs, api_client=svc.api).auth_token()
                self._ask_head(f"http://{head.status.pod_ip}:8265", {"Authorization": f"Bearer {token}"})
        for ns in (svc.namespace, svc.runs):
            for pod in svc.pods(ns):
                if self.secret in json.dumps(pod.to_dict(), default=str):
                    self.leaks.add(f"pod spec {ns}/{pod.metadata.name}")
        for pid in svc.runner.processes():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if self.secret in cmdline:
                self.leaks.add(f"command line of pid {pid}: {cmdline[:200]}")

    def _ask_head(self, dashboard: str, auth: dict[str, str]) -> None:
        jobs = httpx.get(f"{dashboard}/api/jobs/", headers=auth, timeout=5).json()
        for job in jobs:
            if self.secret in json.dumps(job):
                self.leaks.add(f"Ray job API: job {job.get('submission_id')}")
            if job.get("submission_id"):
                self.jobs[job["submission_id"]] = job
        nodes = httpx.get(f"{dashboard}/nodes?view=summary", headers=auth, timeout=5).json()
        for node in nodes.get("data", {}).get("summary", []):
            raylet = node.get("raylet", {})
            if raylet.get("isHeadNode"):
                self.heads.add(raylet.get("nodeId", ""))


def _run_folder(service: Service, name: str) -> str:
    """The store prefix of the run named `name` (one run id per spec)."""
    s3 = service.s3.client()
    prefix = f"drill/runs/{name}/"
    found = s3.list_objects_v2(Bucket=service.s3.bucket, Prefix=prefix, Delimiter="/").get("CommonPrefixes", [])
    assert len(found) == 1, found
    return str(found[0]["Prefix"])


def _stored(service: Service, key: str) -> Any:
    return json.loads(service.s3.client().get_object(Bucket=service.s3.bucket, Key=key)["Body"].read())


def _final_state(service: Service, run_id: Any, timeout_s: float, *, through_crash: bool = False) -> Any:
    """The flow run once it has ended (`through_crash`: a Crashed state is waited through, as the rerun follows)."""

    def ended() -> Any:
        (run,) = [r for r in service.flow_runs() if r.id == run_id]
        return run if run.state.is_final() and not (through_crash and run.state.is_crashed()) else None

    return service.wait("the flow run to end", ended, timeout_s)


def _states(service: Service, run_id: Any) -> list[str]:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    async def read() -> list[str]:
        async with get_client() as c:
            return [s.name for s in await c.read_flow_run_states(run_id)]

    with temporary_settings({PREFECT_API_URL: service.prefect_url, PREFECT_API_AUTH_STRING: PREFECT_AUTH}):
        return asyncio.run(read())


def test_a_release_runs_from_the_webhook_to_a_verdict_on_the_installed_service(service: Service) -> None:
    sha = new_sha()
    hub_snapshot(service.hub, REPO_NAME, sha)
    with Watch(service, service.s3.secret_key) as watch:
        posted = time.monotonic()
        first = service.post_release(REPO_NAME, sha)
        assert first.status_code == 202, first.text
        again = service.post_release(REPO_NAME, sha)  # the hub retries a delivery it thinks was lost
        assert again.status_code in (200, 202) and again.json()["duplicate"] is True, again.text
        (run,) = service.wait("the release's flow run", lambda: service.flow_runs(sha), 180)
        created = time.monotonic()
        final = _final_state(service, run.id, 1800)
        ended = time.monotonic()
    assert final.state.is_completed(), f"{final.state}\n{service.logs()}"
    assert len(service.flow_runs(sha)) == 1  # exactly one run for the two deliveries
    # The chart's Prefect API answers only with the auth string (the receiver, worker and flow-run pod had it).
    anonymous = httpx.post(f"{service.prefect_url}/flow_runs/filter", json={}, timeout=30)
    assert anonymous.status_code == 401, anonymous.text

    # The worker's Job ran the flow in the runs namespace; the run's RayCluster was made there, then deleted.
    from kubernetes import client

    def succeeded() -> list[Any]:  # the Job's status follows its pod's exit by a few seconds
        jobs = client.BatchV1Api(service.api).list_namespaced_job(
            service.runs, label_selector=f"prefect.io/flow-run-id={run.id}"
        )
        return jobs.items if jobs.items and all(j.status.succeeded == 1 for j in jobs.items) else []

    assert len(service.wait("the flow-run Job to succeed", succeeded, 120)) == 1
    (cluster,) = watch.clusters.values()
    assert cluster["metadata"]["namespace"] == service.runs and cluster["metadata"]["name"] in watch.ready_at
    assert cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == "day0-drill:test"
    assert service.rayclusters() == [] and not [
        p for p in service.pods(service.runs) if "ray.io/cluster" in p.metadata.labels
    ]

    # Steps 2, 5 and 6 ran as Ray jobs, each driver on a worker pod; the results and the report are in S3.
    name = run.parameters["spec"]["metadata"]["name"]
    folder = _run_folder(service, name)
    results = {s: _stored(service, f"{folder}{s}/result.json") for s in ("analyze", "operators", "trial", "inference")}
    for step in ("operators", "trial", "inference"):
        execution = results[step]["execution"]
        assert execution["backend"] == "kuberay" and execution["cluster"] == cluster["metadata"]["name"], execution
        job = watch.jobs[execution["job_id"]]
        assert job["driver_node_id"] and job["driver_node_id"] not in watch.heads, (step, job, watch.heads)
    assert watch.heads, "the head's Ray node was never seen"
    assert all(r["verdict"] in ("pass", "warn") for r in results.values()), {
        s: r["reasons"] for s, r in results.items()
    }
    assert results["trial"]["candidate"]["workers"] == 2
    assert {"fixed", "elastic"} <= watch.groups, watch.groups  # two trial workers: the autoscaler grew the elastic pool
    service.s3.client().head_object(Bucket=service.s3.bucket, Key=f"{folder}report.html")

    # The verdict is readable from Prefect: the run's artifacts link the report.
    artifacts = service.artifacts(run.id)
    (link,) = [a for a in artifacts if (a.key or "").startswith("report-")]  # Prefect stores a link as Markdown
    assert f"s3://{service.s3.bucket}/{folder}report.html" in str(link.data), link.data
    (card,) = [a for a in artifacts if (a.key or "").startswith("scorecard-")]
    assert "scorecard" in str(card.data).lower(), card.data

    # The store's secret never left its Secret.
    assert watch.jobs and not watch.leaks, watch.leaks

    _UNINTERRUPTED.update(loss=results["trial"]["candidate"]["loss"], cluster=cluster)
    timings = {
        "payload_to_flow_run_s": round(created - posted, 1),
        "payload_to_raycluster_ready_s": round(watch.ready_at[cluster["metadata"]["name"]] - posted, 1),
        "payload_to_verdict_s": round(ended - posted, 1),
    }
    print(f"release-day drill timings: {timings}")
    if out := os.environ.get("DAY0_RELEASE_DAY_TIMINGS"):
        Path(out).write_text(json.dumps(timings))


@pytest.mark.drill  # `make drill`: its parts have faster tests in `make test` (the module docstring, 5.)
def test_upgrade_then_a_lost_flow_run_pod_is_rerun_and_resumes_from_its_checkpoint(service: Service) -> None:
    if "loss" not in _UNINTERRUPTED:
        pytest.fail("needs the uninterrupted run of the previous test (run the module, not this test alone)")
    service.upgrade("clusterSpec.nodePools.elastic.elastic.max=2")
    sha = new_sha()
    hub_snapshot(service.hub, REPO_NAME, sha)
    with Watch(service, service.s3.secret_key) as watch:
        assert service.post_release(REPO_NAME, sha).status_code == 202
        (run,) = service.wait("the release's flow run", lambda: service.flow_runs(sha), 180)
        name = run.parameters["spec"]["metadata"]["name"]
        s3, bucket = service.s3.client(), service.s3.bucket

        def checkpointed() -> bool:
            folder = _run_folder(service, name)
            listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{folder}trial/checkpoints/candidate/")
            return any("/step_" in o["Key"] for o in listed.get("Contents", []))

        service.wait("a candidate checkpoint", checkpointed, 1200)
        time.sleep(6)  # the checkpoint's upload completes and is reported before the node goes
        (pod,) = service.pods(service.runs, f"prefect.io/flow-run-id={run.id}")
        lost = pod.spec.node_name
        service.runner.delete_node(lost)
        final = _final_state(service, run.id, 1800, through_crash=True)
    assert final.state.is_completed(), f"{final.state}\n{service.logs()}"
    states = _states(service, run.id)
    assert "Crashed" in states and "AwaitingRetry" in states, states
    assert final.run_count == 2, final.run_count
    reruns = service.pods(service.runs, f"prefect.io/flow-run-id={run.id}")
    assert reruns and all(p.spec.node_name != lost for p in reruns)

    # One RayCluster name (per run id), made twice: the dead attempt's was swept, and both have the upgrade.
    (cluster,) = watch.clusters.values()
    groups = {g["groupName"]: g for g in cluster["spec"]["workerGroupSpecs"]}
    assert (
        groups["elastic"]["maxReplicas"] == 2
        and _UNINTERRUPTED["cluster"]["spec"]["workerGroupSpecs"][1]["maxReplicas"] == 1
    )
    assert service.rayclusters() == []

    folder = _run_folder(service, name)
    manifest = _stored(service, f"{folder}manifest.json")
    first, second = manifest["attempts"]
    assert {r["step"]: r["status"] for r in first}["trial"] == "interrupted", first
    statuses = {r["step"]: r["status"] for r in second}
    assert [s for s in ("analyze", "operators", "parallel", "optimize") if statuses[s] != "cached"] == [], statuses
    trial = _stored(service, f"{folder}trial/result.json")
    candidate = next(r for r in trial["runs"] if r["role"] == "candidate")
    assert candidate["resumed_from_step"] >= TRIAL_CHECKPOINT_EVERY, candidate
    assert trial["candidate"]["loss"][-1] == pytest.approx(_UNINTERRUPTED["loss"][-1], abs=1e-6)
    assert not watch.leaks, watch.leaks


@pytest.mark.drill
def test_a_ray_worker_lost_mid_trial_is_replaced_and_the_trial_resumes_from_its_checkpoint(service: Service) -> None:
    if "loss" not in _UNINTERRUPTED:
        pytest.fail("needs the uninterrupted run of the first test (`make drill` runs it first)")
    # One elastic pod at most again (pods of a group share ports on the pod runner); slow candidate steps, so
    # the node goes while the candidate trains.
    faults = {"workPool.jobDefaults.env.DAY0_TRIAL_FAULTS": json.dumps({"step_delay_s": 2.0})}
    service.upgrade("clusterSpec.nodePools.elastic.elastic.max=1", strings=faults)
    sha = new_sha()
    hub_snapshot(service.hub, REPO_NAME, sha)
    assert service.post_release(REPO_NAME, sha).status_code == 202
    (run,) = service.wait("the release's flow run", lambda: service.flow_runs(sha), 180)
    name = run.parameters["spec"]["metadata"]["name"]
    s3, bucket = service.s3.client(), service.s3.bucket

    def checkpointed() -> bool:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{_run_folder(service, name)}trial/checkpoints/candidate/")
        return any("/step_" in o["Key"] for o in listed.get("Contents", []))

    service.wait("a candidate checkpoint", checkpointed, 1200)
    time.sleep(3 * 2.0)  # three slow steps: the checkpoint's upload is complete and reported
    (victim,) = [p for p in service.pods(service.runs, "ray.io/group=fixed") if p.metadata.deletion_timestamp is None]
    service.runner.delete_node(victim.spec.node_name)
    final = _final_state(service, run.id, 1800)
    assert final.state.is_completed() and final.run_count == 1, f"{final.state}\n{service.logs()}"
    trial = _stored(service, f"{_run_folder(service, name)}trial/result.json")
    kinds = [e["kind"] for e in trial["execution"]["events"]]
    assert "node-lost" in kinds and "pod-replaced" in kinds, kinds
    # Two ways back, both from the checkpoint: Ray Train restarts the lost worker inside the job, or, when the
    # node also held the job's driver, the backend submits the job again and it restores from the checkpoint.
    candidate = next(r for r in trial["runs"] if r["role"] == "candidate")
    resumed = [r["resumed_from_step"] for r in trial["recoveries"]] + [candidate["resumed_from_step"]]
    assert max(resumed) >= TRIAL_CHECKPOINT_EVERY, (trial["recoveries"], candidate, kinds)
    print(f"ray worker loss: events {kinds}, resumed from step {max(resumed)}")
    assert trial["candidate"]["loss"][-1] == pytest.approx(_UNINTERRUPTED["loss"][-1], abs=1e-6)
    assert service.rayclusters() == []
