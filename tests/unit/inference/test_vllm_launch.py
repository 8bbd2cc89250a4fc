"""The vLLM launch path without vLLM: an engine environment whose `python` is a small stand-in that
takes vLLM's arguments, refuses an fp8 KV cache as a build without it would (exit 1, an error line),
and otherwise answers /health, /metrics (`vllm:cache_config_info` from the arguments it was given)
and streaming completions, with a child process of its own as vLLM's engine core has. It checks
what day0 does around the engine: the arguments, the refusal turned into a finding and a restart, the
cache read back, the last error line of an engine that cannot start, and the whole process group
gone afterwards."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from day0.steps.inference.server import EngineConfig, ServingError, serve

STAND_IN = r"""
import json, subprocess, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
value = lambda flag: args[args.index(flag) + 1]
if value("--kv-cache-dtype") == "fp8":
    print("INFO starting", flush=True)
    print("ValueError: fp8 KV cache is not supported on this platform", flush=True)
    print("UserWarning: resource_tracker: leaked shared_memory objects", flush=True)
    sys.exit(1)
if "broken" in value("--model"):
    print("RuntimeError: cannot load the model: no such architecture", flush=True)
    sys.exit(1)
core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # the engine core
print(f"core pid {core.pid}", flush=True)
metrics = ('vllm:cache_config_info{block_size="%s",cache_dtype="%s",num_gpu_blocks="%s"} 1.0\n'
           % (value("--block-size"), value("--kv-cache-dtype"), value("--num-gpu-blocks-override")))


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, body, kind="text/plain"):
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(metrics.encode() if self.path == "/metrics" else b"")

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
        events = [{"choices": [{"index": 0, "text": " a"}]},
                  {"choices": [{"index": 0, "text": " b", "finish_reason": "length"}], "usage": usage}]
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self._send(body.encode(), "text/event-stream")


ThreadingHTTPServer(("127.0.0.1", int(value("--port"))), Handler).serve_forever()
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    """An engine environment's `python` that runs the stand-in whatever module it is asked for."""
    (tmp_path / "stand_in.py").write_text(STAND_IN)
    python = tmp_path / "env" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {tmp_path / "stand_in.py"} "$@"\n')
    python.chmod(0o755)
    return python


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_refused_fp8_cache_is_a_finding_and_the_engine_restarts_without_it(stand_in: Path, tmp_path: Path) -> None:
    config = EngineConfig(
        model_dir=tmp_path / "model", engine="vllm", python=stand_in, kv_cache_dtype="fp8", cache_blocks=48
    )
    with serve(config, tmp_path) as (server, finding):
        command = server.command()
        assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert command[command.index("--num-gpu-blocks-override") + 1] == "48"
        assert command[command.index("--dtype") + 1] == "float32"  # cpu: the served model's own
        assert finding is not None and finding.feature == "an fp8 KV cache"
        assert finding.error == "ValueError: fp8 KV cache is not supported on this platform"  # not the last line
        assert server.config.kv_cache_dtype == "auto"
        reported = server.reported_cache()
        assert reported is not None and (reported.num_blocks, reported.block_size) == (48, 32)
        assert reported.cache_dtype == "auto"
        core = int(server.log_path.read_text().split("core pid ")[1].split()[0])
        assert _alive(core)
    # SIGKILL to the group is delivered at once but a busy core takes a moment to die: poll, bounded.
    deadline = time.monotonic() + 10
    while _alive(core) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(core) and server.process is not None and server.process.poll() is not None


def test_an_engine_that_cannot_load_the_model_fails_with_its_error_line(stand_in: Path, tmp_path: Path) -> None:
    config = EngineConfig(model_dir=tmp_path / "broken", engine="vllm", python=stand_in)
    with (
        pytest.raises(ServingError, match="vLLM exited with 1 on start-up: RuntimeError: cannot load the model"),
        serve(config, tmp_path),
    ):
        pass
    assert [p.name for p in tmp_path.glob("engine-*.log")]  # its log stays beside the step's files
