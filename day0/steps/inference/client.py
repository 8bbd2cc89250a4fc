"""The load benchmark client: async, streaming, tokenizer-free, with vLLM `bench serve`'s arrival
process and metric definitions (see `day0.steps.inference.metrics`). aiohttp, not httpx: against a local
stub it sustained 2-3x httpx's request rate here, and the client must never be the bottleneck.

    requests = [LoadRequest(prompt="...", max_tokens=32)] * 16
    run = asyncio.run(run_load("http://127.0.0.1:8000", "model", requests, LoadSettings(concurrency=4)))
    summary = summarize(run.records, run.duration_s, slo_ms=(2000, 100))

Arrivals: with a `request_rate`, inter-arrival gaps are gamma(shape=burstiness, scale=1/(rate x
burstiness)) (burstiness 1 = Poisson); without one, requests go as fast as `concurrency` allows. At
most `concurrency` are in flight either way. Warm-up requests run first and are not recorded.
Each request asks for `stream_options.include_usage`, so token counts come from the server's usage.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from typing import Literal

import aiohttp
from pydantic import BaseModel, Field

from day0.steps.inference.metrics import RequestRecord

__all__ = ["LoadRequest", "LoadRun", "LoadSettings", "arrival_gaps", "run_load"]


class LoadRequest(BaseModel):
    prompt: str
    max_tokens: int = Field(ge=1)


class LoadSettings(BaseModel):
    concurrency: int = Field(1, ge=1, description="Most requests in flight.")
    request_rate: float | None = Field(None, gt=0, description="Arrivals per second; None: as fast as possible.")
    burstiness: float = Field(1.0, gt=0)
    warmup: int = Field(0, ge=0, description="Requests sent first, not recorded.")
    timeout_s: float = Field(300, gt=0)
    seed: int = 0
    endpoint: Literal["completions", "chat"] = "completions"


class LoadRun(BaseModel):
    records: list[RequestRecord]
    duration_s: float = Field(description="From the first measured request's start to the last one's end.")
    settings: LoadSettings


def arrival_gaps(n: int, rate: float | None, burstiness: float, seed: int) -> list[float]:
    """Seconds to wait before each of `n` requests: gamma(burstiness, 1/(rate x burstiness)), or 0s."""
    if rate is None:
        return [0.0] * n
    rng = random.Random(seed)
    return [rng.gammavariate(burstiness, 1 / (rate * burstiness)) for _ in range(n)]


def _payload(model: str, request: LoadRequest, endpoint: str) -> dict[str, object]:
    body: dict[str, object] = {
        "model": model,
        "max_tokens": request.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": request.prompt}]
    else:
        body["prompt"] = request.prompt
    return body


def _text(choice: dict[str, object]) -> str:
    """The text a chunk carries: completions' `text`, or chat's `delta.content` (the role chunk has none)."""
    delta = choice.get("delta")
    text = choice.get("text") or (delta.get("content") if isinstance(delta, dict) else None)
    return text if isinstance(text, str) else ""


async def _one(session: aiohttp.ClientSession, url: str, body: dict[str, object]) -> RequestRecord:
    record, start = RequestRecord(), time.perf_counter()
    last = start
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                detail = (await response.read()).decode(errors="replace")[:200]
                return RequestRecord(error=f"HTTP {response.status}: {detail}")
            async for raw in response.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or (data := line[5:].strip()) == "[DONE]":
                    continue
                event = json.loads(data)
                if "error" in event:
                    return RequestRecord(error=f"error event: {str(event['error'])[:200]}")
                now = time.perf_counter()
                for choice in event.get("choices") or []:
                    if _text(choice):
                        if record.ttft_s is None:
                            record.ttft_s = now - start
                        else:
                            record.itl_s.append(now - last)
                        last, record.chunks = now, record.chunks + 1
                    record.finish_reason = choice.get("finish_reason") or record.finish_reason
                if usage := event.get("usage"):
                    record.prompt_tokens = usage.get("prompt_tokens")
                    record.output_tokens = usage.get("completion_tokens")
    except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        return RequestRecord(error=f"{type(exc).__name__}: {str(exc)[:200]}")
    record.e2el_s = time.perf_counter() - start
    if record.ttft_s is None and record.output_tokens:  # tokens that decode to no text (special tokens)
        record.ttft_s = record.e2el_s  # arrived with the final event: vLLM's first-event rule
    return record


async def run_load(base_url: str, model: str, requests: Sequence[LoadRequest], settings: LoadSettings) -> LoadRun:
    """Send `settings.warmup` warm-up requests, then `requests` under the arrival process; all records."""
    if not requests:
        raise ValueError("run_load needs at least one request")
    url = base_url.rstrip("/") + ("/v1/chat/completions" if settings.endpoint == "chat" else "/v1/completions")
    gate = asyncio.Semaphore(settings.concurrency)
    connector = aiohttp.TCPConnector(limit=settings.concurrency)
    timeout = aiohttp.ClientTimeout(total=settings.timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def send(request: LoadRequest) -> tuple[RequestRecord, float, float]:
            async with gate:
                t0 = time.perf_counter()
                record = await _one(session, url, _payload(model, request, settings.endpoint))
                return record, t0, time.perf_counter()

        await asyncio.gather(*(send(requests[i % len(requests)]) for i in range(settings.warmup)))
        gaps = arrival_gaps(len(requests), settings.request_rate, settings.burstiness, settings.seed)
        tasks = []
        for request, gap in zip(requests, gaps):
            if gap:
                await asyncio.sleep(gap)
            tasks.append(asyncio.create_task(send(request)))
        done = await asyncio.gather(*tasks)
    begin = min(t0 for _, t0, _ in done)
    end = max(t1 for _, _, t1 in done)
    return LoadRun(records=[r for r, _, _ in done], duration_s=max(end - begin, 1e-9), settings=settings)
