"""`adapt/release` as docs/operations/triggers.md calls it: `prefect deployment run` with a spec path and with an
inline spec mapping, executed by a real process worker (`prefect worker start --run-once`) against
the session's Prefect server; each flow run ends Completed and publishes a link artifact to its
report and the scorecard as a Markdown artifact."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from day0.paths import REPO_ROOT
from flows._artifacts import artifact_key, scorecard_of
from flows.adapt import spec_parameter
from tests.fixtures.paths import REPO
from tests.fixtures.processes import descendants
from tests.fixtures.trial import long_trial_spec


def test_a_relative_spec_path_resolves_against_the_repository_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = spec_parameter("configs/pipelines/tiny-local.yaml")
    assert spec.metadata.name == "tiny-deepseek-v3-on-cpu"
    inline = yaml.safe_load((REPO_ROOT / "configs/pipelines/tiny-local.yaml").read_text())
    assert spec_parameter(inline).fingerprint() == spec.fingerprint()


def test_a_spec_path_that_does_not_exist_is_a_usage_error_naming_it() -> None:
    from day0.errors import Day0Error

    with pytest.raises(Day0Error, match=re.escape("configs/pipelines/nope.yaml")) as caught:
        spec_parameter("configs/pipelines/nope.yaml")
    assert caught.value.exit_code == 2


def test_scorecard_is_the_reports_head() -> None:
    md = "# day0 report: x: PASS\n\n| a | b |\n\n## Day-0 scorecard\n\n| layer |\n\n## Steps\n\n| step |\n"
    assert scorecard_of(md) == "# day0 report: x: PASS\n\n| a | b |\n\n## Day-0 scorecard\n\n| layer |\n"
    assert artifact_key("report", "Tiny_DeepSeek.v3 on CPU") == "report-tiny-deepseek-v3-on-cpu"


def _prefect(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(REPO / ".venv/bin/prefect"), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.integration
def test_deployment_run_with_a_path_and_with_an_inline_spec(prefect_server: None, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, FlowRunFilter
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "PREFECT_HOME": str(tmp_path / "home")}
    deploy = subprocess.run(
        ["make", "-o", ".venv/.installed", "deploy"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
    spec = yaml.safe_load((REPO / "configs/pipelines/tiny-local.yaml").read_text())
    by_path = {**spec, "metadata": {"name": "by-path"}, "storage": f"file://{tmp_path}/store"}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(by_path))
    inline = {**spec, "metadata": {"name": "inline"}, "storage": f"file://{tmp_path}/store"}
    only = json.dumps(["analyze"])
    path_param = f"spec={tmp_path / 'spec.yaml'}"
    _prefect(env, "deployment", "run", "adapt/release", "--param", path_param, "--param", f"only={only}")
    _prefect(env, "deployment", "run", "adapt/release", "--params", json.dumps({"spec": inline, "only": ["analyze"]}))
    _prefect(env, "worker", "start", "--pool", "day0-local", "--run-once", timeout=900)

    async def read() -> list[tuple[Any, list[Any]]]:
        async with get_client() as client:
            deployment = await client.read_deployment_by_name("adapt/release")
            runs = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(deployment_id={"any_": [deployment.id]}),  # type: ignore[arg-type]
            )
            out = []
            for run in runs:
                if run.parameters.get("only") != ["analyze"]:
                    continue
                arts = await client.read_artifacts(
                    artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
                )
                out.append((run, arts))
            return out

    runs = asyncio.run(read())
    names = set()
    for run, artifacts in runs:
        assert run.state is not None and run.state.is_completed(), (run.name, run.state)
        spec_name = "by-path" if isinstance(run.parameters["spec"], str) else "inline"
        names.add(spec_name)
        by_key = {a.key: a for a in artifacts}
        link = str(by_key[f"report-{spec_name}"].data)  # "[text](file:///.../report.html)"
        report = Path(link.split("](file://", 1)[1].removesuffix(")"))
        assert report.name == "report.html" and report.is_file() and report.is_relative_to(tmp_path), link
        scorecard = str(by_key[f"scorecard-{spec_name}"].data)
        assert "## Day-0 scorecard" in scorecard and "numerical (steps 1-2)" in scorecard, scorecard
    assert names == {"by-path", "inline"}, runs


def _running(needle: str, ancestor: int) -> bool:
    """Whether a process `ancestor` started (its descendants) has `needle` in its command line."""
    return any(needle in cmd for cmd in descendants(ancestor).values())


@pytest.mark.integration
def test_a_deployment_run_cancelled_mid_trial_ends_cancelled_not_crashed(prefect_server: None, tmp_path: Path) -> None:
    """A process worker's run cancelled through Prefect while its trial trains: Prefect's runner stops it
    with SIGTERM (the flow's own watcher slowed here so that the runner acts first), and the flow run ends
    Cancelled with no Crashed state on the way. It read Cancelling, Crashed, AwaitingRetry (the recovery
    automation's reschedule of the crash), Cancelled: a worker that took the rescheduled run in between
    would have run it again."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import State, StateType
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "PREFECT_HOME": str(tmp_path / "home")}
    deploy = subprocess.run(
        ["make", "-o", ".venv/.installed", "deploy"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
    env["DAY0_RUN_CANCEL_POLL_S"] = "600"
    spec = long_trial_spec("cancelled", f"file://{tmp_path}/store")
    started = _prefect(env, "deployment", "run", "adapt/release", "--params", json.dumps({"spec": spec}))
    flow_run_id = UUID(re.search(r"UUID: ([0-9a-f-]{36})", started.stdout)[1])  # type: ignore[index]
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [str(REPO / ".venv/bin/prefect"), "worker", "start", "--pool", "day0-local", "--run-once"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 300
        while not _running("RayTrainWorker", worker.pid) and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _running("RayTrainWorker", worker.pid), (tmp_path / "worker.log").read_text()[-3000:]
        # the trial's start is in the store (its marker reads as `interrupted` if nothing records its end)
        while not list((tmp_path / "store").rglob("*trial.started.json")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list((tmp_path / "store").rglob("*trial.started.json")), "the trial's start was not recorded"
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(flow_run_id, State(type=StateType.CANCELLING))  # as `prefect flow-run cancel`
            worker.wait(timeout=120)
            states = [s.type for s in client.read_flow_run_states(flow_run_id)]
    finally:
        worker.kill()
    after = states[states.index(StateType.RUNNING) + 1 :]  # Cancelled once or twice (the flow's, the runner's)
    assert after[0] == StateType.CANCELLING and set(after[1:]) == {StateType.CANCELLED}, states
    manifest = json.loads(next((tmp_path / "store").rglob("manifest.json")).read_text())
    assert [(r["step"], r["status"]) for r in manifest["attempts"][-1]][-1] == ("trial", "interrupted"), manifest
    # issue 44: the flow-run process's end (CancelledRun) was a 40-line traceback in the worker's log
    output = (tmp_path / "worker.log").read_text()
    assert "prefect.exceptions.CancelledRun" not in output and "exited with unexpected exception" not in output, output[
        -3000:
    ]
