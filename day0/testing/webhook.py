"""Webhook receiver scaffolding for tests and benchmarks: realistic hub payloads, and the receiver
as a real `day0 webhook serve` subprocess on a free loopback port (restartable, own process group).

    with Receiver(secret="s", watch=watch_yaml, store="file:///tmp/store", env=env) as rx:
        httpx.post(rx.url + "/webhook", json=hub_payload("org/m", sha), headers=rx.headers)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

__all__ = ["Receiver", "hub_payload"]


def hub_payload(
    repo: str,
    sha: str,
    *,
    scope: str = "repo.content",
    action: str = "update",
    ref: str = "refs/heads/main",
    repo_type: str = "model",
) -> dict[str, Any]:
    """A delivery shaped like the hub's (fields from its webhook docs), for a push of `sha` to `ref`."""
    org = repo.split("/", 1)[0]
    return {
        "event": {"action": action, "scope": scope},
        "repo": {
            "type": repo_type,
            "name": repo,
            "id": "6542a1f0c1e0d2b3a4f5e6d7",
            "private": False,
            "url": {"web": f"https://huggingface.co/{repo}", "api": f"https://huggingface.co/api/models/{repo}"},
            "headSha": sha,
            "owner": {"id": "60f1abcd1234567890abcdef"},
            "tags": ["transformers", "safetensors"],
        },
        "updatedRefs": [{"ref": ref, "oldSha": "0" * 40, "newSha": sha}],
        "webhook": {"id": "6650aa11bb22cc33dd44ee55", "version": 3},
        "org": org,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Receiver:
    def __init__(self, secret: str, watch: Path, store: str, env: dict[str, str], log: Path | None = None):
        self.secret, self.watch, self.store, self.env, self.log = secret, watch, store, env, log
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.headers = {"X-Webhook-Secret": secret}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 120) -> None:
        env = {**os.environ, **self.env, "DAY0_WEBHOOK_SECRET": self.secret}
        cmd = [sys.executable, "-m", "cli", "webhook", "serve", "--port", str(self.port)]
        cmd += ["--watch", str(self.watch), "--store", self.store]
        out = self.log.open("ab") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"day0 webhook serve exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        raise RuntimeError(f"day0 webhook serve did not answer /healthz within {timeout_s} s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> Receiver:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
