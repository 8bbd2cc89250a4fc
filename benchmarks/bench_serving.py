"""Step 6 benchmark: the load client's own ceiling, and the served model's latency-throughput curve.

    python -m benchmarks.run serving

1. Ceiling: requests/s the async streaming client (`day0.steps.inference.client`) sustains against a
   trivial OpenAI-compatible stub (FastAPI on uvicorn, in its own process, streaming 16 chunks and
   usage with no model behind it), side by side with a simple sequential client (one blocking
   httpx stream after another) in the same run. The stub shares the machine's cores, so the
   client's own CPU time per request is recorded too: its CPU-bound rate is what it could reach
   against an infinitely fast server.
2. Curve: the tiny GQA MoE (`tiny-qwen3-moe`, untrained) under `transformers serve
   --continuous-batching`, swept over concurrency 1, 2, 4, 8.
The client must never be the bottleneck: its ceiling is recorded as a multiple of the best served
request rate (target >= 10x).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from day0.core.ports import free_port
from day0.steps.inference.client import LoadRequest, LoadSettings, run_load
from day0.steps.inference.metrics import summarize
from day0.steps.inference.model import ServedModel, build_served_model, held_out_text, write_model_dir
from day0.steps.inference.server import EngineConfig, serve

STUB_CHUNKS = 16
CEILING_REQUESTS, CEILING_CONCURRENCY, SEQUENTIAL_REQUESTS = 2000, 64, 300
SWEEP, SWEEP_REQUESTS, OUTPUT_TOKENS = (1, 2, 4, 8), 24, 32

stub_app = FastAPI()
_CHUNKS = [f"data: {json.dumps({'choices': [{'index': 0, 'text': f' w{i}'}]})}\n\n" for i in range(STUB_CHUNKS)]
_USAGE = {"prompt_tokens": 8, "completion_tokens": STUB_CHUNKS, "total_tokens": 8 + STUB_CHUNKS}
_FINAL = f"data: {json.dumps({'choices': [{'index': 0, 'text': '', 'finish_reason': 'length'}], 'usage': _USAGE})}\n\n"


@stub_app.post("/v1/completions")
async def _stub_completions(body: dict) -> StreamingResponse:  # type: ignore[type-arg]
    async def events() -> AsyncIterator[str]:  # async: a sync generator would run in a thread pool
        for i in range(STUB_CHUNKS):
            yield _CHUNKS[i]
        yield _FINAL

    return StreamingResponse(events(), media_type="text/event-stream")


def _start_stub() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "benchmarks.bench_serving:stub_app", "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--log-level", "warning"], cwd=Path(__file__).resolve().parent.parent)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            httpx.get(url + "/docs", timeout=1)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the stub server did not start")


def _sequential(url: str, n: int) -> float:
    """A simple client: one blocking streamed request after another; requests/s."""
    body = {"model": "stub", "prompt": "hi", "max_tokens": STUB_CHUNKS, "stream": True}
    t0 = time.perf_counter()
    with httpx.Client(base_url=url) as client:
        for _ in range(n):
            with client.stream("POST", "/v1/completions", json=body) as r:
                for _line in r.iter_lines():
                    pass
    return n / (time.perf_counter() - t0)


def client_ceiling() -> dict:
    proc, url = _start_stub()
    try:
        requests = [LoadRequest(prompt="hi", max_tokens=STUB_CHUNKS)] * CEILING_REQUESTS
        settings = LoadSettings(concurrency=CEILING_CONCURRENCY, warmup=CEILING_CONCURRENCY)
        cpu0 = time.process_time()
        run = asyncio.run(run_load(url, "stub", requests, settings))
        cpu_per_request = (time.process_time() - cpu0) / (CEILING_REQUESTS + CEILING_CONCURRENCY)
        summary = summarize(run.records, run.duration_s)
        sequential = _sequential(url, SEQUENTIAL_REQUESTS)
    finally:
        proc.terminate()
        proc.wait(10)
    return {
        "async_client_req_s": round(summary.request_throughput, 1),
        "async_client_chunks_s": round(summary.request_throughput * STUB_CHUNKS, 0),
        "async_completed": summary.completed,
        "async_failed": summary.failed,
        "async_client_cpu_ms_per_req": round(cpu_per_request * 1000, 3),
        "async_client_cpu_bound_req_s": round(1 / cpu_per_request, 0),
        "sequential_client_req_s": round(sequential, 1),
        "concurrency": CEILING_CONCURRENCY,
    }


def served_curve() -> list[dict]:
    from day0.model.source import resolve_model_source
    from day0.steps.trial.config import TrialScale
    from day0.steps.trial.data import prepare_data
    from day0.steps.trial.model import scale_config

    data = prepare_data(None, 512)
    config = scale_config(resolve_model_source("tiny-qwen3-moe").config, TrialScale(), vocab_size=data.vocab_size,
                          seq_len=128, eos_token_id=data.eos_token_id)  # fmt: skip
    served = ServedModel(label="tiny-qwen3-moe", config=config, tokenizer=str(data.tokenizer_dir))
    words = held_out_text().split()
    requests = [
        LoadRequest(prompt=" ".join(words[i * 11 : i * 11 + 24]), max_tokens=OUTPUT_TOKENS)
        for i in range(SWEEP_REQUESTS)
    ]
    points = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_model_dir(build_served_model(served), served, Path(tmp) / "model")
        with serve(EngineConfig(model_dir=model_dir, cache_blocks=128, block_size=32, max_batch_tokens=512)) as (
            server,
            _,
        ):
            for c in SWEEP:
                run = asyncio.run(
                    run_load(server.base_url, server.model, requests, LoadSettings(concurrency=c, warmup=2))
                )
                s = summarize(run.records, run.duration_s)
                points.append(
                    {
                        "concurrency": c,
                        "completed": s.completed,
                        "failed": s.failed,
                        "req_s": round(s.request_throughput, 2),
                        "output_tok_s": round(s.output_throughput, 1),
                        "ttft_p99_ms": round(s.ttft.p99_ms, 1) if s.ttft else None,
                        "tpot_p99_ms": round(s.tpot.p99_ms, 2) if s.tpot else None,
                        "e2el_p99_ms": round(s.e2el.p99_ms, 1) if s.e2el else None,
                        "errors": s.errors,
                    }
                )
    return points


def run() -> dict:
    ceiling = client_ceiling()
    curve = served_curve()
    best = max(p["req_s"] for p in curve)
    ratio = ceiling["async_client_req_s"] / best
    return {
        "client_ceiling": ceiling,
        "served_curve": curve,
        "best_served_req_s": best,
        "client_headroom_x": round(ratio, 1),
        "client_never_bottleneck": ratio >= 10,
        "target": "async client ceiling >= 10x the best served request rate",
    }
