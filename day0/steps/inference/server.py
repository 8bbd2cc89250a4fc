"""The serving engine as a real process on 127.0.0.1: launch, health, a probe request, stop, and the
fallback when the engine cannot run the architecture with continuous batching.

    with serve(EngineConfig(model_dir=d, ...)) as (server, finding):
        ...  # server.base_url is an OpenAI-compatible API; finding says what fell back, if anything

Contracts:
- the paged KV cache is always bounded (`--cb-num-blocks`, `--cb-max-batch-tokens`): unbounded,
  `transformers serve` sizes it from ~90% of the host's RAM and stalls its first request;
- the process runs in its own session and is stopped with its whole process group on every path
  (SIGTERM, then SIGKILL), also when start-up or the probe fails;
- engines lag new architectures. The limit shows either at start-up (transformers 5.25 builds its
  paged cache before listening and exits on a layer type it has no allocator for, such as hybrid
  linear attention) or at the first request (the batching worker dies, `/health` turns
  `cb_worker_dead`; MLA did so before 5.25). The engine exiting on start-up or failing a probe
  request under continuous batching makes `serve` restart without it and return the engine's error
  as an `EngineFinding`. A server that cannot answer a probe either way raises `ServingError`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from pydantic import BaseModel, Field

from day0.core.ports import free_port

__all__ = ["EngineConfig", "EngineFinding", "Server", "ServingError", "serve"]

ENGINE = "transformers serve"


class ServingError(RuntimeError):
    """The engine did not start or could not answer a request (the message holds its log's tail)."""


class EngineConfig(BaseModel):
    model_dir: Path
    device: str = "cpu"
    continuous_batching: bool = True
    cache_blocks: int = Field(64, ge=1, description="--cb-num-blocks")
    block_size: int = Field(32, ge=1, description="--cb-block-size")
    max_batch_tokens: int = Field(512, ge=1, description="--cb-max-batch-tokens")
    startup_timeout_s: float = 300.0


class EngineFinding(BaseModel):
    """A Day-0 finding: what the engine could not do for this architecture, and what was done instead."""

    engine: str
    feature: str
    error: str = Field(description="The engine's own error message.")
    fallback: str


class Server:
    """One engine process; `stop()` is idempotent and kills the whole process group."""

    def __init__(self, config: EngineConfig, log_dir: Path) -> None:
        self.config, self.port = config, free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.model = str(config.model_dir)
        self.log_path = log_dir / f"engine-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        c = self.config
        cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(c.model_dir), "--device", c.device]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "info"]
        if c.continuous_batching:
            cmd += ["--continuous-batching", "--cb-num-blocks", str(c.cache_blocks)]
            cmd += ["--cb-block-size", str(c.block_size), "--cb-max-batch-tokens", str(c.max_batch_tokens)]
        return cmd

    def start(self) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServingError(f"{ENGINE} exited with {self.process.returncode} on start-up: {self.log_tail()}")
            if self.health()[0] == 200:
                return
            time.sleep(0.5)
        raise ServingError(f"{ENGINE} did not answer /health within {self.config.startup_timeout_s:.0f} s")

    def health(self) -> tuple[int | None, str]:
        """(status code, body) of GET /health; (None, why) when nothing answers."""
        try:
            r = httpx.get(f"{self.base_url}/health", timeout=5)
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"
        return r.status_code, r.text

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None and self.health()[0] == 200

    def probe(self, timeout_s: float = 120) -> str | None:
        """Send one short streaming request: None if text and usage came back, else the engine's error."""
        payload = {"model": self.model, "prompt": "The", "max_tokens": 2, "stream": True}
        try:
            with httpx.stream("POST", f"{self.base_url}/v1/completions", json=payload, timeout=timeout_s) as r:
                if r.status_code != 200:
                    return f"HTTP {r.status_code}: {r.read().decode(errors='replace')[:500]}"
                for line in r.iter_lines():
                    if line.startswith("data:") and line[5:].strip() != "[DONE]":
                        event = json.loads(line[5:])
                        if "error" in event:
                            return str(event["error"])
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        code, body = self.health()
        return None if code == 200 else f"/health answered {code}: {body}"

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace_s: float = 10) -> None:
        p = self.process
        if p is None or p.returncode is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):  # children the engine left behind in its group
            os.killpg(p.pid, signal.SIGKILL)


def _start_and_probe(server: Server) -> str | None:
    """None when the server answers a probe; else the engine's error (its last log line when it exited
    on start-up with continuous batching). Any other start-up failure raises: nothing to fall back from."""
    try:
        server.start()
    except ServingError:
        if not server.config.continuous_batching or server.process is None or server.process.poll() is None:
            raise
        return server.log_tail(1).strip() or f"{ENGINE} exited with {server.process.returncode} on start-up"
    return server.probe()


@contextmanager
def serve(config: EngineConfig, log_dir: Path | None = None) -> Iterator[tuple[Server, EngineFinding | None]]:
    """A probed, answering server (falling back without continuous batching if the engine's limit
    shows), stopped on exit whatever happens."""
    with tempfile.TemporaryDirectory(prefix="day0-serve-") as tmp:
        logs = log_dir or Path(tmp)
        server, finding = Server(config, logs), None
        try:
            error = _start_and_probe(server)
            if error and config.continuous_batching:
                server.stop()
                finding = EngineFinding(
                    engine=ENGINE,
                    feature="continuous batching (paged KV cache)",
                    error=error,
                    fallback="served without continuous batching: one request at a time, dynamic KV cache",
                )
                server = Server(config.model_copy(update={"continuous_batching": False}), logs)
                error = _start_and_probe(server)
            if error:
                raise ServingError(f"{ENGINE} cannot answer a request: {error}")
            yield server, finding
        finally:
            server.stop()
