"""An expected error (bad input: a `Day0Error`; a failed verdict: `RunFailed`) is one line in a flow
run's logs, naming the step and the message, with no traceback; an unexpected one (a bug) keeps its
traceback, once. Read back from the session's real Prefect server, for flow runs started in this
process and for a deployment run executed by a real process worker (which relays the flow-run
process's output: what a user sees in the worker's log)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.fixtures.paths import REPO

pytestmark = pytest.mark.integration
TRACEBACK = "Traceback (most recent call last)"
UNKNOWN_ARCH = "unknown architecture 'no-such-arch'"


def _spec(tmp_path: Path, name: str, model: str = "tiny-deepseek-v3") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "model": model,
        "platform": "cpu",
        "steps": ["analyze"],
        "storage": f"file://{tmp_path}/store",
    }


def _unanalysable_model(tmp_path: Path) -> str:
    """A model whose config names an architecture nobody knows: step 1 refuses it (`ModelError`)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "no-such-arch", "hidden_size": 8}))
    return str(model)


def _logs(flow_run_id: UUID) -> list[str]:
    """The messages of a flow run's logs (its task runs' included), oldest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)  # logs of a run in this process are sent in the background

    async def read() -> list[str]:
        async with get_client() as client:
            logs = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), sort=LogSort.TIMESTAMP_ASC
            )
        return [log.message for log in logs]

    return asyncio.run(read())


def _about(messages: list[str], text: str) -> list[str]:
    """The messages (or output lines) that mention `text`, but Prefect's one-line "Finished in state
    Failed(...)" of each run, which quotes its state's message."""
    return [m for m in messages if text in m and "Finished in state Failed(" not in m]


def test_a_refused_input_is_one_line_naming_the_step(prefect_server: None, tmp_path: Path) -> None:
    from day0.errors import ModelError
    from flows.adapt import adapt

    state = adapt(spec=_spec(tmp_path, "refused", _unanalysable_model(tmp_path)), fresh=True, return_state=True)
    assert state.is_failed() and UNKNOWN_ARCH in (state.message or "")
    assert isinstance(state.result(raise_on_failure=False), ModelError), "the caller still gets the error: exit 2"
    assert state.state_details.flow_run_id is not None
    messages = _logs(state.state_details.flow_run_id)
    assert not [m for m in messages if TRACEBACK in m], messages
    about = _about(messages, UNKNOWN_ARCH)
    assert len(about) == 1 and about[0].startswith("analyze: ModelError: model "), messages
    assert "\n" not in about[0], "one line"


def test_a_bug_in_a_step_keeps_its_traceback_and_the_verdict_is_one_line(
    prefect_server: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import day0.steps.analyze.run
    from day0.errors import RunFailed
    from flows.adapt import adapt

    def bug(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in step 1")

    monkeypatch.setattr(day0.steps.analyze.run, "analyze_model", bug)
    state = adapt(spec=_spec(tmp_path, "bug"), fresh=True, return_state=True)
    assert state.is_failed() and "analyze" in (state.message or "")
    assert isinstance(state.result(raise_on_failure=False), RunFailed), "a failed step: exit 1"
    assert state.state_details.flow_run_id is not None
    messages = _logs(state.state_details.flow_run_id)
    tracebacks = [m for m in messages if TRACEBACK in m]
    assert len(tracebacks) == 1 and "RuntimeError: a bug in step 1" in tracebacks[0], messages
    assert ", in bug\n" in tracebacks[0], "the traceback reaches the code that raised"
    verdict = [m for m in messages if m.startswith("RunFailed: ")]
    assert len(verdict) == 1 and "analyze" in verdict[0] and "\n" not in verdict[0], messages


def test_a_deployment_run_with_bad_input_logs_one_line_in_the_worker(prefect_server: None, tmp_path: Path) -> None:
    """The user's report: one bad input in a deployment run logged three tracebacks in the worker
    (the task engine's, the flow engine's, the flow-run process's as it exited)."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL

    pool, name = f"day0-errors-{uuid.uuid4().hex[:8]}", "error-logs"  # apart from other tests' pools

    async def create_pool() -> None:
        async with get_client() as client:
            await client.create_work_pool(WorkPoolCreate(name=pool, type="process"))

    asyncio.run(create_pool())
    source = flow.from_source(source=str(REPO), entrypoint="flows/adapt.py:adapt")
    source.deploy(name=name, work_pool_name=pool, build=False, push=False, print_next_steps=False)
    spec = _spec(tmp_path, "deployed-refused", _unanalysable_model(tmp_path))
    run = run_deployment(f"adapt/{name}", parameters={"spec": spec, "fresh": True}, timeout=0)
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "PREFECT_HOME": str(tmp_path / "home")}
    worker = subprocess.run(
        [str(REPO / ".venv/bin/prefect"), "worker", "start", "--pool", pool, "--run-once"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = worker.stdout + worker.stderr
    assert worker.returncode == 0, output[-3000:]

    async def final_state() -> Any:
        async with get_client() as client:
            return (await client.read_flow_run(run.id)).state

    state = asyncio.run(final_state())
    assert state.is_failed() and UNKNOWN_ARCH in state.message, output[-3000:]
    assert TRACEBACK not in output, output[-6000:]
    shown = _about(output.splitlines(), UNKNOWN_ARCH)
    assert len(shown) == 1 and "analyze: ModelError: model " in shown[0], output[-3000:]
    messages = _logs(run.id)
    assert not [m for m in messages if TRACEBACK in m], messages
    assert len(_about(messages, UNKNOWN_ARCH)) == 1, messages


def test_a_spec_path_is_data_and_no_file_s_contents_reach_prefect(
    prefect_server: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 44: a deployment run with `spec=/etc/shadow` failed echoing the file's lines into its state
    message and logs. A spec path must name a YAML file inside DAY0_RUN_SPEC_ROOTS (links resolved
    first), and a file there that is no spec is refused by its error count, quoting none of it."""
    from flows.adapt import adapt

    specs, outside = tmp_path / "specs", tmp_path / "outside"
    specs.mkdir(), outside.mkdir()
    monkeypatch.setenv("DAY0_RUN_SPEC_ROOTS", str(specs))
    (outside / "creds.yaml").write_text("SECRET-LINE-1: hunter2\n")
    (specs / "link.yaml").symlink_to(outside / "creds.yaml")
    (specs / "notaspec.yaml").write_text("SECRET-LINE-2: [1]\nmetadata: {name: SECRET-LINE-3}\n")
    secret = str(Path("/etc/shadow").read_text().splitlines()[0]) if Path("/etc/shadow").is_file() else "root:"
    cases = [
        ("/etc/shadow", "spec /etc/shadow: expected a YAML spec file"),
        (str(specs / "link.yaml"), "outside the folders specs may come from"),
        (str(specs / "notaspec.yaml"), "error(s), not quoted here"),
    ]
    for spec, words in cases:
        state = adapt(spec=spec, return_state=True)
        assert state.is_failed() and words in (state.message or ""), state.message
        assert state.state_details.flow_run_id is not None
        shown = [state.message or "", *_logs(state.state_details.flow_run_id)]
        assert not [m for m in shown if "SECRET-LINE" in m or secret in m or "hunter2" in m], shown


def test_a_store_folder_of_its_own_is_no_namespace(prefect_server: None, tmp_path: Path) -> None:
    """Issue 44: `namespace: webhook/queue` put a run's files where the receiver reads its queue, and the
    receiver turned them into releases."""
    from flows.adapt import adapt

    for namespace in ("webhook/queue", "webhook", "structures", "calibration/x", "regression/baselines"):
        state = adapt(spec=_spec(tmp_path, "ns"), namespace=namespace, return_state=True)
        assert state.is_failed() and "is the store's own folder" in (state.message or ""), state.message
    assert not (tmp_path / "store").exists(), "nothing was written"
    allowed = adapt(spec=_spec(tmp_path, "ns"), namespace="regression/runs/tiny/20260101T000000Z", return_state=True)
    assert allowed.is_completed(), allowed.message


def test_a_flow_run_of_a_spec_that_is_running_refuses_and_writes_nothing(prefect_server: None, tmp_path: Path) -> None:
    """Issue 44: the run lock held for `day0 run` only; a deployment run of a running spec shared its folder."""
    import signal
    import socket
    import sys

    from day0.runs.context import RunContext
    from day0.spec.pipeline import spec_from_dict
    from flows.adapt import adapt

    spec = _spec(tmp_path, "locked")
    folder = tmp_path / "store" / RunContext.create(spec_from_dict(spec, "spec")).prefix
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        started = (Path("/proc") / str(holder.pid) / "stat").read_text().rpartition(")")[2].split()[19]
        (folder / "lock").mkdir(parents=True)
        record = {"host": socket.gethostname(), "pid": holder.pid, "pid_started": started, "started_at": "then"}
        (folder / "lock/holder.json").write_text(json.dumps(record))
        state = adapt(spec=spec, return_state=True)
        assert state.is_failed() and "is already running (pid" in (state.message or ""), state.message
        assert sorted(p.name for p in folder.iterdir()) == ["lock"], "a refused run wrote into the running one's folder"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert adapt(spec=spec, return_state=True).is_completed(), "a dead holder's lock is taken over"
    assert not (folder / "lock").exists() or not list((folder / "lock").iterdir()), "released at the end"
