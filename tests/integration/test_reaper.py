"""Nothing of a run outlives `day0 run` or `day0 calibrate` (issue 17: 15 of 18 kills left the ephemeral
Prefect server alive; issue 8: Ray's DashboardAgent and RuntimeEnvAgent carry no run token and stayed
with PPID 1 after kill -9 in the trial and of calibrate; SIGTERM in the trial exited -6, Ray's abort,
not 130; killing the CLI and its watcher together left the Prefect server), and an interrupted attempt
records what it ran (issue 11: it was an empty list in manifest.json). Real processes: the process
tree is listed before and after, and what is left is named with its command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from cli.reaper import TOKEN_ENV, carriers
from tests.fixtures.cli import cli_env, start_day0
from tests.fixtures.paths import REPO
from tests.fixtures.processes import descendants, processes
from tests.fixtures.trial import long_trial_spec

pytestmark = pytest.mark.integration
AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


def _alive(pids: dict[int, str]) -> dict[int, str]:
    table = processes()
    return {pid: cmd for pid, cmd in pids.items() if pid in table and table[pid][1] == cmd}


def _token_of(pid: int) -> str:
    for item in (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0"):
        if item.startswith(f"{TOKEN_ENV}=".encode()):
            return item.split(b"=", 1)[1].decode()
    raise AssertionError(f"process {pid} carries no {TOKEN_ENV}")


def _listing(pids: dict[int, str]) -> str:
    table = processes()
    return "\n".join(f"{p} (ppid {table.get(p, (0,))[0]}) {c[:120]}" for p, c in pids.items())


_DROP = ("PREFECT_API_URL", TOKEN_ENV)  # an ephemeral Prefect server of its own; no token of ours


def _env(tmp_path: Path) -> dict[str, str]:
    return {"PREFECT_HOME": str(tmp_path / "prefect"), "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def _start_run(tmp_path: Path, preexec_fn: Callable[[], object] | None = None, **env: str) -> subprocess.Popen[str]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(long_trial_spec("killed", f"file://{tmp_path}/store")))
    return _start(tmp_path, "run", spec, preexec_fn=preexec_fn, **env)


def _start(
    tmp_path: Path, *args: str | Path, preexec_fn: Callable[[], object] | None = None, **env: str
) -> subprocess.Popen[str]:
    """`day0 *args` with its own Prefect home and no token of ours, logging into tmp_path/cli.log
    (`preexec_fn` run in the child before it starts, as subprocess.Popen's)."""
    log = (tmp_path / "cli.log").open("w")
    return start_day0(
        *args, env=_env(tmp_path) | env, drop=_DROP, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn
    )


def _wait_for(cli: subprocess.Popen[str], needles: tuple[str, ...], timeout_s: float = 300) -> dict[int, str]:
    """The CLI's process tree once every needle is in some command line in it."""
    deadline, tree = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline and cli.poll() is None:
        tree = descendants(cli.pid)
        if all(any(n in cmd for cmd in tree.values()) for n in needles):
            time.sleep(1.0)  # let the processes started with them come up too
            return descendants(cli.pid)
        time.sleep(0.5)
    cli.kill()
    cli.wait()
    raise AssertionError(f"never saw {needles} (exit {cli.returncode}); its tree:\n{_listing(tree)}")


def _left_after(before: dict[int, str], token: str, timeout_s: float = 25) -> dict[int, str]:
    """What of `before` (or carrying `token`) is still running once `timeout_s` passed or none is."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (_alive(before) or carriers(token)):
        time.sleep(0.5)
    return {**_alive(before), **{pid: "(carries the run's token)" for pid in carriers(token)}}


def _attempts(tmp_path: Path) -> list[list[dict]]:
    """The attempts as manifest.json (the view people read) has them."""
    return json.loads(next((tmp_path / "store").rglob("manifest.json")).read_text())["attempts"]


def _run_token(tree: dict[int, str]) -> str:
    return _token_of(next(pid for pid, cmd in tree.items() if "uvicorn" in cmd))


def test_kill_9_during_the_trial_leaves_nothing_and_the_manifest_says_what_ran(tmp_path: Path) -> None:
    cli = _start_run(tmp_path)
    before = _wait_for(cli, ("uvicorn", "raylet", "RayTrainWorker", *AGENTS))
    token = _run_token(before)
    os.kill(cli.pid, signal.SIGKILL)
    cli.wait()
    left = _left_after(before, token)
    assert not left, "still running after kill -9 of day0 run:\n" + _listing(left)
    (attempt,) = _attempts(tmp_path)
    ran = [(r["step"], r["status"]) for r in attempt]
    assert ran == [
        ("analyze", "executed"),
        ("parallel", "executed"),
        ("optimize", "executed"),
        ("trial", "interrupted"),
    ]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "ctrl-c"])
def test_sigterm_or_ctrl_c_during_the_trial_exits_130_and_records_the_trial_as_interrupted(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """SIGTERM was held by Ray's wait (it was the rest of the training: in CI, over 120 s); Ctrl-C went to
    Ray Train's own handler (exit 1 through its sys.exit)."""
    cli = _start_run(tmp_path)
    before = _wait_for(cli, ("uvicorn", "raylet", "RayTrainWorker"))
    token = _run_token(before)
    os.kill(cli.pid, signum)
    try:
        rc = cli.wait(timeout=60)  # about 7 s here
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"still running 60 s after {signum.name}; its tree:\n"
            + _listing(descendants(cli.pid))
            + "\n"
            + (tmp_path / "cli.log").read_text()[-3000:]
        ) from None
    finally:
        cli.kill()
    log = (tmp_path / "cli.log").read_text()
    assert rc == 130, f"exit {rc}, expected 130:\n{log[-3000:]}"
    assert log.rstrip().endswith("interrupted"), log[-2000:]
    assert "SIGTERM received" not in log, "Ray's C++ handler took the signal (it aborts the driver: -6)"
    left = _left_after(before, token)
    assert not left, "still running after day0 run ended on SIGTERM:\n" + _listing(left)
    (attempt,) = _attempts(tmp_path)
    assert [(r["step"], r["status"]) for r in attempt][:3] == [
        (s, "executed") for s in ("analyze", "parallel", "optimize")
    ]
    trial = attempt[-1]
    assert (trial["step"], trial["status"]) == ("trial", "interrupted"), attempt
    assert trial["seconds"] > 1.0 and trial["error"].startswith("interrupted ("), trial


def test_cancelled_through_prefect_during_the_trial_the_run_stops_and_ends_cancelled(
    tmp_path: Path, prefect_server: None
) -> None:
    """`day0 run` against a Prefect server, cancelled there mid-trial as `prefect flow-run cancel` (or the
    UI) does: it stops (exit 130), the trial reads interrupted, nothing is left, and the flow run ends
    Cancelled. It ended Crashed, which the recovery automation (flows/recovery.py) reruns."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import State, StateType
    from prefect.settings import PREFECT_API_URL

    cli = _start_run(tmp_path, PREFECT_API_URL=str(PREFECT_API_URL.value()))
    before = _wait_for(cli, ("raylet", "RayTrainWorker"))
    token = _token_of(next(pid for pid, cmd in before.items() if "gcs_server" in cmd))
    running = FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING])))
    with get_client(sync_client=True) as client:
        (run,) = [
            r
            for r in client.read_flow_runs(flow_run_filter=running)
            if isinstance(spec := r.parameters.get("spec"), dict) and spec["storage"] == f"file://{tmp_path}/store"
        ]
        client.set_flow_run_state(run.id, State(type=StateType.CANCELLING))
        try:
            rc = cli.wait(timeout=60)  # the watcher polls every 3 s: about 10 s here
        except subprocess.TimeoutExpired:
            raise AssertionError(
                "still running 60 s after the cancellation:\n" + (tmp_path / "cli.log").read_text()[-3000:]
            ) from None
        finally:
            cli.kill()
        states = [(s.type, s.message) for s in client.read_flow_run_states(run.id)]
    log = (tmp_path / "cli.log").read_text()
    assert rc == 130, f"exit {rc}, expected 130:\n{log[-3000:]}"
    assert [t for t, _ in states][-3:] == [StateType.RUNNING, StateType.CANCELLING, StateType.CANCELLED], states
    assert "report: " in states[-1][1], states[-1]
    assert "stopped: cancelled through Prefect" in log[-2000:], log[-2000:]
    left = _left_after(before, token)
    assert not left, "still running after the cancelled run ended:\n" + _listing(left)
    (attempt,) = _attempts(tmp_path)
    trial = attempt[-1]
    assert (trial["step"], trial["status"]) == ("trial", "interrupted"), attempt
    assert trial["error"].startswith("interrupted (KeyboardInterrupt)"), trial


def test_kill_9_of_calibrate_leaves_no_ray(tmp_path: Path) -> None:
    cli = _start(tmp_path, "calibrate", "cpu", "--store", f"file://{tmp_path}/store")
    before = _wait_for(cli, ("cli.reaper", "raylet", *AGENTS))
    token = _token_of(next(pid for pid, cmd in before.items() if "gcs_server" in cmd))
    os.kill(cli.pid, signal.SIGKILL)
    cli.wait()
    left = _left_after(before, token)
    assert not left, "still running after kill -9 of day0 calibrate:\n" + _listing(left)


def test_kill_9_of_run_and_its_watcher_is_swept_by_the_next_watcher(tmp_path: Path) -> None:
    """Nothing of ours runs once both are killed: the Prefect server (started by Prefect from any of
    its threads, so no PR_SET_PDEATHSIG can be set on it) and Ray's agents stay until the next
    watcher on this machine starts (the next `day0 run` or `day0 calibrate`) and stops them."""
    cli = _start_run(tmp_path)
    before = _wait_for(cli, ("uvicorn", "raylet", *AGENTS))
    token = _run_token(before)
    watcher = next(pid for pid, cmd in before.items() if "cli.reaper" in cmd)
    os.kill(watcher, signal.SIGKILL)
    os.kill(cli.pid, signal.SIGKILL)
    cli.wait()
    deadline = time.monotonic() + 30  # the watcher, not our child, is gone once its new parent reaps it
    while watcher in processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert watcher not in processes(), "the killed watcher is still listed"
    left = _alive(before)
    print("left by kill -9 of day0 run and its watcher:\n" + _listing(left))  # the Prefect server, agents
    nxt = subprocess.run(
        [sys.executable, "-c", "import time; from cli.reaper import start_reaper; start_reaper(); time.sleep(2)"],
        cwd=REPO,
        env=cli_env(_env(tmp_path), _DROP),
        timeout=60,
    )
    assert nxt.returncode == 0
    left = _left_after(before, token)
    assert not left, "the next watcher left these running:\n" + _listing(left)
