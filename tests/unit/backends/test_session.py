"""The run's backend without a cluster: sizing, preconditions, the job contract through a real S3
server, the local backend, and the report's record of where the steps ran."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from day0.backends.jobs import StepJob, read_url, write_url
from day0.backends.kuberay.backend import job_env
from day0.backends.kuberay.manifest import build_raycluster, workers_for_pods
from day0.backends.kuberay.status import ClusterError
from day0.backends.local.backend import LocalBackend
from day0.backends.session import check_backend, run_backend
from day0.errors import UsageError
from day0.paths import CONFIGS_DIR
from day0.runs.context import RunContext
from day0.spec.cluster import ClusterSpec
from day0.spec.pipeline import load_yaml, spec_from_dict
from day0.steps.registry import pods_needed


def _cluster(fixed: int = 3, elastic_max: int = 2, elastic_min: int = 0) -> ClusterSpec:
    acc = {"resource": "day0.io/accel", "per_node": 1, "memory_gib": 4}
    return ClusterSpec.model_validate(
        {
            "backend": "kuberay",
            "head": {"node_selector": {"day0.io/pool": "heads"}, "cpus": 1, "memory_gib": 2},
            "node_pools": [
                {"name": "fixed", "accelerator": acc, "nodes": fixed},
                {"name": "burst", "accelerator": acc, "elastic": {"min": elastic_min, "max": elastic_max}},
            ],
        }
    )


def _spec(**overrides: Any):
    raw = load_yaml(CONFIGS_DIR / "pipelines" / "tiny-local.yaml") | overrides
    return spec_from_dict(raw)


def test_pods_fill_fixed_pools_first_and_leave_elastic_at_their_minimum() -> None:
    assert workers_for_pods(_cluster(), 2) == {"fixed": 2, "burst": 0}
    # more than the fixed pool: the autoscaler grows the elastic pool when the work asks for it
    assert workers_for_pods(_cluster(), 4) == {"fixed": 3, "burst": 0}
    assert workers_for_pods(_cluster(elastic_min=1), 1) == {"fixed": 1, "burst": 1}
    with pytest.raises(ClusterError, match=r"need 6 worker nodes; the node pools hold at most 5"):
        workers_for_pods(_cluster(), 6)


def test_head_follows_the_cluster_spec() -> None:
    manifest = build_raycluster(_cluster(), "run-1", workers={"fixed": 2, "burst": 0})
    head = manifest["spec"]["headGroupSpec"]["template"]["spec"]
    assert head["nodeSelector"] == {"day0.io/pool": "heads"}
    assert head["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
    assert manifest["spec"]["enableInTreeAutoscaling"] is True


def test_pods_needed_follow_the_planned_steps() -> None:
    spec = _spec(trial={"workers": 3})
    assert pods_needed(spec, ["analyze", "operators"]) == 1
    assert pods_needed(spec, ["analyze", "operators", "parallel", "optimize", "trial"]) == 3
    assert pods_needed(spec, ["analyze"]) == 1


def test_kuberay_preconditions_name_the_field() -> None:
    with pytest.raises(UsageError, match=r"storage: 'file://.day0': the kuberay backend needs an s3:// store"):
        check_backend(_spec(cluster=_cluster().model_dump()))
    no_pools = _cluster().model_dump() | {"node_pools": []}
    with pytest.raises(UsageError, match=r"cluster.node_pools"):
        check_backend(_spec(cluster=no_pools, storage="s3://bucket/x"))
    check_backend(_spec())  # local: nothing to check


def test_job_env_carries_where_the_store_is_and_never_a_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAY0_STORE_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("DAY0_STORE_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "DAY0_STORE_ACCESS_KEY_ID",
        "DAY0_STORE_SECRET_ACCESS_KEY",
    ):
        monkeypatch.setenv(name, "s3cr3t-value")
    monkeypatch.setenv("HOME_SECRET_UNRELATED", "x")
    monkeypatch.setenv("DAY0_TRIAL_FAULTS", '{"nan_at_step": 1}')  # a drill travels in the trial's request
    monkeypatch.setenv("DAY0_TESTING_ANYTHING", "1")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the flow's own Ray mode; the cluster's pods are in token mode
    env = job_env()
    assert env["DAY0_STORE_ENDPOINT_URL"] == "http://127.0.0.1:9" and env["DAY0_STORE_REGION"] == "eu-west-1"
    assert env["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert "s3cr3t-value" not in env.values(), sorted(env)  # credentials come from the pods' Secret
    assert "HOME_SECRET_UNRELATED" not in env and env["PYTHONUNBUFFERED"] == "1"
    assert not [name for name in env if name.startswith(("DAY0_TRIAL_", "DAY0_TESTING_"))]
    assert "RAY_AUTH_MODE" not in env  # it would override KubeRay's RAY_AUTH_MODE=token in the driver


class _Req(BaseModel):
    n: int


class _Res(BaseModel):
    square: int


def _square(req: _Req, progress) -> _Res:
    progress(f"squaring {req.n}")
    return _Res(square=req.n * req.n)


SQUARE = StepJob("tests.unit.backends.test_session", _Req, _Res, _square)


@pytest.mark.integration
def test_job_main_reads_and_writes_through_s3(s3_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    base = f"s3://{s3_server.bucket}/jobs"
    write_url(f"{base}/request.json", _Req(n=7).model_dump_json().encode())
    assert SQUARE.main([f"{base}/request.json", f"{base}/result.json"]) == 0
    assert json.loads(read_url(f"{base}/result.json")) == {"square": 49}
    assert "squaring 7" in capsys.readouterr().out
    assert SQUARE.main(["only-one"]) == 2
    assert (
        SQUARE.entrypoint("s3://b/r q.json", "s3://b/out")
        == "python -m tests.unit.backends.test_session 's3://b/r q.json' s3://b/out"
    )


def test_job_main_on_plain_paths(tmp_path: Path) -> None:
    (tmp_path / "req.json").write_text('{"n": 3}')
    assert SQUARE.main([str(tmp_path / "req.json"), str(tmp_path / "out.json")]) == 0
    assert json.loads((tmp_path / "out.json").read_text()) == {"square": 9}


def test_local_backend_runs_in_process_and_records_where() -> None:
    ctx = RunContext.create(_spec())
    seen: list[str] = []
    with run_backend(ctx, 1, progress=seen.append) as backend:
        assert isinstance(backend, LocalBackend) and ctx.backend is backend
        result, execution = backend.run("x", SQUARE, _Req(n=4), seen.append)
    assert result == _Res(square=16) and seen == ["squaring 4"]
    assert execution.backend == "local" and execution.job_id is None and execution.duration_s is not None
    assert ctx.backend is not backend  # outside the run: a fresh local backend


@pytest.mark.parametrize(
    ("family", "host", "address"), [("AF_INET", "127.0.0.1", "127.0.0.1"), ("AF_INET6", "::1", "[::1]")]
)
def test_an_address_where_no_ray_listens_fails_in_seconds(family: str, host: str, address: str) -> None:
    """`ray.init` would retry a dead `host:port` for about 15 minutes; `connect` says so at once."""
    import socket
    import time

    import ray

    from day0.backends.local.ray import connect

    ray.shutdown()  # a Ray an earlier test on this worker left connected: `connect` would return it
    with socket.socket(getattr(socket, family)) as s:  # a port that was free a moment ago: nothing listens there
        try:
            s.bind((host, 0))
        except OSError as exc:
            pytest.skip(f"this machine has no {host} loopback to test against: {exc}")
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=f"no Ray cluster answers at {re.escape(address)}:{port}: .*refused"):
        connect(f"{address}:{port}")
    assert time.monotonic() - t0 < 10 and not ray.is_initialized()


class _Cluster:
    """A RayCluster stand-in whose jobs end as scripted (Ray's outcomes), for the backend's resubmission rule."""

    name = "day0-test"

    def __init__(self, store: Any, result_key: str, outcomes: list[tuple[str, str | None]]) -> None:
        self.store, self.result_key, self.outcomes = store, result_key, list(outcomes)
        self.events: list[Any] = []
        self.submitted: list[dict[str, Any]] = []

    def dashboard_address(self, via: str) -> str:
        return "http://127.0.0.1:9"

    def run_job(self, entrypoint: str, **options: Any) -> Any:
        from types import SimpleNamespace

        from day0.backends.jobs import JobOutcome

        self.submitted.append(options)
        status, error_type = self.outcomes.pop(0)
        if status == "SUCCEEDED":
            self.store.put_bytes(self.result_key, _Res(square=49).model_dump_json().encode())
        outcome = JobOutcome(
            submission_id=options["sub_id"], address="x", status=status, duration_s=1.0, error_type=error_type
        )
        return SimpleNamespace(job=outcome)


@pytest.mark.parametrize(
    ("outcomes", "submissions", "ok"),
    [
        ([("FAILED", "JOB_SUPERVISOR_ACTOR_DIED"), ("SUCCEEDED", None)], 2, True),  # the driver's node was lost
        ([("FAILED", "JOB_SUPERVISOR_ACTOR_DIED")] * 3, 3, False),  # job_resubmits: 2, then the step fails
        ([("FAILED", "JOB_ENTRYPOINT_COMMAND_ERROR")], 1, False),  # the job's own error: never resubmitted
    ],
    ids=["resubmitted", "bounded", "own-error"],
)
def test_a_job_whose_drivers_node_was_lost_is_submitted_again_within_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcomes: list[Any], submissions: int, ok: bool
) -> None:
    from day0.backends.base import JobFailed
    from day0.backends.kuberay.backend import KubeRayBackend
    from day0.store import FileStore

    spec = _spec(cluster=_cluster().model_dump(), storage="s3://bucket/x")
    ctx = RunContext.create(spec)
    store = FileStore(tmp_path)
    monkeypatch.setattr(RunContext, "store", property(lambda self: store))
    backend = KubeRayBackend(ctx, 1)
    cluster = _Cluster(store, ctx.key("square", "job", "result.json"), outcomes)
    backend.cluster = cluster  # type: ignore[assignment]  # the stand-in
    said: list[str] = []
    if ok:
        result, execution = backend.run("square", SQUARE, _Req(n=7), said.append)
        assert result.square == 49 and [e.kind for e in execution.events] == ["job-resubmitted"]
    else:
        with pytest.raises(JobFailed):
            backend.run("square", SQUARE, _Req(n=7), said.append)
    assert len(cluster.submitted) == submissions
    assert len({o["sub_id"] for o in cluster.submitted}) == submissions  # a new submission id each time
    assert sum("driver's node was lost" in line for line in said) == (submissions - 1)
