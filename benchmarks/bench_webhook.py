"""Webhook acceptance under a bounded burst: 1,000 deliveries on loopback to `day0 webhook serve`
(real uvicorn, file-store dedupe) in front of a real Prefect server (Prefect's test harness) with the
adaptation deployment registered: 500 unique commits, each delivered twice (the copy shuffled into
the burst), at most 32 in flight. Checks zero lost and zero duplicated runs by reading every flow
run back from Prefect.

    python -m benchmarks.run webhook
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

UNIQUE, COPIES, IN_FLIGHT = 500, 2, 32


async def _burst(url: str, headers: dict[str, str], payloads: list[dict[str, Any]]) -> list[tuple[int, float, dict]]:
    gate = asyncio.Semaphore(IN_FLIGHT)
    limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def one(payload: dict[str, Any]) -> tuple[int, float, dict]:
            async with gate:
                t0 = time.perf_counter()
                r = await client.post(url, json=payload, headers=headers)
                return r.status_code, time.perf_counter() - t0, r.json()

        return await asyncio.gather(*(one(p) for p in payloads))


async def _runs(deployment_name: str) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    async with get_client() as client:
        deployment = await client.read_deployment_by_name(deployment_name)
        found: list[Any] = []
        while page := await client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])),
            limit=200,
            offset=len(found),
        ):
            found += page
        return found


def _pct(values: list[float], q: float) -> float:
    return round(statistics.quantiles(values, n=100)[q - 1] * 1000, 2)


def run() -> dict[str, Any]:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    from day0.testing.webhook import Receiver, hub_payload
    from flows.adapt import adapt

    root = Path(tempfile.mkdtemp(prefix="day0-bench-webhook-"))
    template = {
        "model": {"source": "hf://x/y"},
        "platform": "cpu",
        "steps": ["analyze"],
        "storage": f"file://{root}/runs",
    }
    (root / "template.yaml").write_text(yaml.safe_dump(template | {"metadata": {"name": "bench"}}))
    (root / "watch.yaml").write_text(yaml.safe_dump({"watch": {"orgs": ["bench"]}, "template": "template.yaml"}))
    shas = [uuid.uuid4().hex + uuid.uuid4().hex[:8] for _ in range(UNIQUE)]
    payloads = [hub_payload(f"bench/model-{i % 7}", sha) for i, sha in enumerate(shas) for _ in range(COPIES)]
    random.Random(0).shuffle(payloads)
    with prefect_test_harness(server_startup_timeout=120):
        asyncio.run(_apply(adapt))
        env = {"PREFECT_API_URL": str(PREFECT_API_URL.value())}
        with Receiver("bench-secret", root / "watch.yaml", f"file://{root}/store", env) as rx:
            start = time.perf_counter()
            answers = asyncio.run(_burst(rx.url + "/webhook", rx.headers, payloads))
            wall = time.perf_counter() - start
        runs = asyncio.run(_runs("adapt/release"))
    codes = [code for code, _, _ in answers]
    pinned = [r.parameters["spec"]["model"]["source"].rsplit("@", 1)[1] for r in runs]
    latencies = [dt for _, dt, _ in answers]
    result = {
        "deliveries": len(payloads),
        "unique_commits": UNIQUE,
        "in_flight": IN_FLIGHT,
        "accepted_202": codes.count(202),
        "duplicate_200": sum(1 for code, _, body in answers if code == 200 and body.get("reason") == "duplicate"),
        "other_status": len([c for c in codes if c not in (200, 202)]),
        "flow_runs": len(runs),
        "lost_runs": len(set(shas) - set(pinned)),
        "duplicated_runs": len(pinned) - len(set(pinned)),
        "wall_s": round(wall, 2),
        "deliveries_per_s": round(len(payloads) / wall, 1),
        "accepted_per_s": round(codes.count(202) / wall, 1),
        "latency_p50_ms": _pct(latencies, 50),
        "latency_p99_ms": _pct(latencies, 99),
    }
    if result["lost_runs"] or result["duplicated_runs"] or result["other_status"]:
        raise AssertionError(f"webhook burst lost or duplicated runs: {result}")
    return result


async def _apply(flow: Any) -> None:
    deployment = await flow.ato_deployment(name="release")
    await deployment.apply()
