"""`kill -9` of `day0 run` leaves nothing of ours running (issue 17: 15 of 18 kills left the ephemeral
Prefect server alive, and trial kills left Ray agents). The process tree is listed before and after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from cli.reaper import TOKEN_ENV, carriers

REPO = Path(__file__).resolve().parent.parent


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every live process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid = (entry / "stat").read_text().rpartition(")")[2].split()[:2]
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state != "Z":
            table[int(entry.name)] = (int(ppid), cmd)
    return table


def _tree(pid: int) -> dict[int, str]:
    """Descendants of `pid`: pid -> command line."""
    table, found, frontier = _processes(), {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, cmd) in table.items():
            if ppid == parent and child not in found:
                found[child] = cmd
                frontier.append(child)
    return found


def _alive(pids: dict[int, str]) -> dict[int, str]:
    table = _processes()
    return {pid: cmd for pid, cmd in pids.items() if pid in table and table[pid][1] == cmd}


def _token_of(pid: int) -> str:
    for item in (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0"):
        if item.startswith(f"{TOKEN_ENV}=".encode()):
            return item.split(b"=", 1)[1].decode()
    raise AssertionError(f"process {pid} carries no {TOKEN_ENV}")


def test_kill_9_during_a_step_leaves_no_prefect_server_or_ray(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "metadata": {"name": "killed"},
                "model": "tiny-deepseek-v3",
                "platform": "cpu",
                "cluster": "local",
                "steps": ["analyze", "parallel", "optimize", "trial"],
                "storage": f"file://{tmp_path}/store",
                "trial": {"steps": 400, "workers": 2, "seq_len": 32, "micro_batch": 2},
            }
        )
    )  # step 5 runs on Ray
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # the ephemeral server, ours
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), HF_HUB_OFFLINE="1", RAY_USAGE_STATS_ENABLED="0")
    cli = subprocess.Popen(
        [sys.executable, "-m", "cli", "run", str(spec)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline, before = time.monotonic() + 240, {}
    try:
        while time.monotonic() < deadline and cli.poll() is None:
            before = _tree(cli.pid)
            text = "\n".join(before.values())
            if "uvicorn" in text and "raylet" in text:  # the server is up and step 2 started Ray
                break
            time.sleep(0.5)
        assert cli.poll() is None, "the run ended before it could be killed"
        text = "\n".join(f"{pid} {cmd[:120]}" for pid, cmd in before.items())
        assert "uvicorn" in text and "raylet" in text, f"no Prefect server and Ray in the tree:\n{text}"
        token = _token_of(next(pid for pid, cmd in before.items() if "uvicorn" in cmd))
    finally:
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (_alive(before) or carriers(token)):
        time.sleep(0.5)
    left = {**_alive(before), **{pid: "(carries the run's token)" for pid in carriers(token)}}
    assert not left, "still running after kill -9:\n" + "\n".join(f"{p} {c[:120]}" for p, c in left.items())
