"""Webhook receiver scaffolding for tests and benchmarks: realistic hub payloads, the receiver as a
real `day0 webhook serve` subprocess on a free loopback port (restartable, killable with SIGKILL, own
process group), and `SilentServer`, a real TCP server that accepts connections and never answers (a
hung Prefect API).

    with Receiver(secret="s" * 16, watch=watch_yaml, store="file:///tmp/store", env=env) as rx:
        httpx.post(rx.url + "/webhook", json=hub_payload("org/m", sha), headers=rx.headers)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

__all__ = ["Receiver", "SilentServer", "hub_payload"]


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
        self.headers: dict[str, str | bytes] = {"X-Webhook-Secret": secret.encode()}  # the bytes, as the hub sends
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

    def kill(self) -> None:
        """SIGKILL the receiver's process group (no shutdown code runs) and reap it."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(15)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> Receiver:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()


class SilentServer:
    """A TCP server on a free loopback port that accepts every connection, reads what arrives and never
    answers: what a hung Prefect server looks like to its clients. `url` is an API URL for it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/api"
        self.accepted = 0
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.accepted += 1
            self.conns.append(conn)

    def __enter__(self) -> SilentServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()
        self.thread.join(5)
