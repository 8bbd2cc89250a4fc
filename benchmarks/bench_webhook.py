"""Webhook acceptance under load: `day0 webhook serve` (real uvicorn on loopback, file store) in front of
a real Prefect server (Prefect's test harness) with the adaptation deployment registered.

- burst A: 300 distinct releases, 20 in flight: answer latency p50/p99/max (target p99 <= 1 s);
- burst B: 2,000 deliveries, 50 in flight: 1,000 distinct releases each delivered twice (the copy
  shuffled into the burst): every delivery answered, the last within 60 s of the burst's start;
- then the dispatcher drains the queue into Prefect; every flow run is read back: each release must
  have exactly one (0 lost, 0 duplicated), with the drain rate and the receiver's peak memory.

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

A_RELEASES, A_IN_FLIGHT = 300, 20
B_RELEASES, B_COPIES, B_IN_FLIGHT = 1000, 2, 50
B_DEADLINE_S, DRAIN_DEADLINE_S = 60.0, 240.0


async def _burst(url: str, headers: dict[str, Any], payloads: list[dict[str, Any]], in_flight: int) -> list[Any]:
    """(status or 0 when unanswered, seconds, body) per delivery, and the burst's wall time last."""
    gate = asyncio.Semaphore(in_flight)
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(timeout=B_DEADLINE_S, limits=limits) as client:

        async def one(payload: dict[str, Any]) -> tuple[int, float, dict[str, Any]]:
            async with gate:
                t0 = time.perf_counter()
                try:
                    r = await client.post(url, json=payload, headers=headers)
                except httpx.HTTPError:
                    return 0, time.perf_counter() - t0, {}
                return r.status_code, time.perf_counter() - t0, r.json()

        start = time.perf_counter()
        answers = await asyncio.gather(*(one(p) for p in payloads))
        return [*answers, time.perf_counter() - start]


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


def _ms(values: list[float], q: int) -> float:
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000, 1)


def _metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _summary(answers: list[Any], wall: float) -> dict[str, Any]:
    latencies = [dt for _, dt, _ in answers]
    codes = [code for code, _, _ in answers]
    return {
        "deliveries": len(answers),
        "answered": sum(1 for c in codes if c),
        "accepted_202_new": sum(1 for c, _, b in answers if c == 202 and not b.get("duplicate")),
        "duplicates_2xx": sum(1 for c, _, b in answers if c in (200, 202) and b.get("duplicate")),
        "other_status": sum(1 for c in codes if c not in (200, 202)),
        "wall_s": round(wall, 2),
        "deliveries_per_s": round(len(answers) / wall, 1),
        "latency_p50_ms": _ms(latencies, 50),
        "latency_p99_ms": _ms(latencies, 99),
        "latency_max_ms": round(max(latencies) * 1000, 1),
    }


def run() -> dict[str, Any]:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    from flows.adapt import adapt
    from testsupport.webhook import Receiver, hub_payload

    root = Path(tempfile.mkdtemp(prefix="day0-bench-webhook-"))
    template = {"model": {"source": "hf://x/y"}, "platform": "cpu", "steps": ["analyze"], "storage": f"file://{root}"}
    (root / "template.yaml").write_text(yaml.safe_dump(template | {"metadata": {"name": "bench"}}))
    (root / "watch.yaml").write_text(yaml.safe_dump({"watch": {"orgs": ["bench"]}, "template": "template.yaml"}))

    def sha() -> str:
        return uuid.uuid4().hex + uuid.uuid4().hex[:8]

    a_shas = [sha() for _ in range(A_RELEASES)]
    b_shas = [sha() for _ in range(B_RELEASES)]
    a_payloads = [hub_payload(f"bench/a-{i % 7}", s) for i, s in enumerate(a_shas)]
    b_payloads = [hub_payload(f"bench/b-{i % 7}", s) for i, s in enumerate(b_shas) for _ in range(B_COPIES)]
    random.Random(0).shuffle(b_payloads)
    releases = set(a_shas) | set(b_shas)
    with prefect_test_harness(server_startup_timeout=120):
        asyncio.run(_apply(adapt))
        env = {"PREFECT_API_URL": str(PREFECT_API_URL.value())}
        with Receiver("bench-secret-0123456789", root / "watch.yaml", f"file://{root}/store", env) as rx:
            assert rx.proc is not None
            *a_answers, a_wall = asyncio.run(_burst(rx.url + "/webhook", rx.headers, a_payloads, A_IN_FLIGHT))
            *b_answers, b_wall = asyncio.run(_burst(rx.url + "/webhook", rx.headers, b_payloads, B_IN_FLIGHT))
            drain_start = time.perf_counter()
            while _metric(rx.url, "day0_webhook_triggered_total") < len(releases):
                if time.perf_counter() - drain_start > DRAIN_DEADLINE_S:
                    break
                time.sleep(0.5)
            drained = time.perf_counter() - drain_start
            peak_mb = _peak_rss_mb(rx.proc.pid)
            failures = _metric(rx.url, "day0_webhook_trigger_failures_total")
        runs = asyncio.run(_runs("adapt/release"))
    pinned = [r.parameters["spec"]["model"]["source"].rsplit("@", 1)[1] for r in runs]
    result = {
        "burst_a": {"releases": A_RELEASES, "in_flight": A_IN_FLIGHT, **_summary(a_answers, a_wall)},
        "burst_b": {
            "releases": B_RELEASES,
            "copies": B_COPIES,
            "in_flight": B_IN_FLIGHT,
            **_summary(b_answers, b_wall),
        },
        "flow_runs": len(runs),
        "lost_runs": len(releases - set(pinned)),
        "duplicated_runs": len(pinned) - len(set(pinned)),
        "drain_s_after_bursts": round(drained, 1),
        "trigger_failures_retried": int(failures),
        "receiver_peak_rss_mb": peak_mb,
    }
    problems = [
        f"burst A p99 {result['burst_a']['latency_p99_ms']} ms > 1000" * (result["burst_a"]["latency_p99_ms"] > 1000),
        f"burst B took {b_wall:.1f} s > {B_DEADLINE_S:g}" * (b_wall > B_DEADLINE_S),
        "unanswered or refused deliveries"
        * any(r[k] for r in (result["burst_a"], result["burst_b"]) for k in ("other_status",)),
        "lost or duplicated runs" * bool(result["lost_runs"] or result["duplicated_runs"]),
    ]
    if any(problems):
        raise AssertionError(f"webhook bench missed its targets ({'; '.join(p for p in problems if p)}): {result}")
    return result


async def _apply(flow: Any) -> None:
    deployment = await flow.ato_deployment(name="release")
    await deployment.apply()
