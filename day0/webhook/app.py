"""The Hugging Face webhook receiver: a FastAPI app that turns a new model commit into one run of the
adaptation deployment.

    DAY0_WEBHOOK_SECRET=... day0 webhook serve [--host 127.0.0.1] [--port 8765]

Contract, per POST /webhook:
- 401 (empty body) when X-Webhook-Secret does not match (constant-time compare); 413 above
  `max_body_bytes`, counted while reading, before any parsing; 400 for malformed JSON; 422 naming
  the field for a payload that is not a hub delivery (unknown scope, invalid repo id or sha).
- 200 with the reason for deliveries that start nothing (datasets, spaces, deletions, discussions,
  PR refs, repos outside the watch list), and for a repo+sha already triggered (with its flow run id).
- 202 with the flow run id for a new model repo or a new main commit of a watched repo: the dedupe
  claim in the artifact store is taken first (one winner among concurrent copies and across
  restarts), then `run_deployment(..., timeout=0, idempotency_key=repo@sha)`. A claim left without a
  run id for `stale_claim_s` (a receiver killed in between) is triggered again by the next copy.
- 503 when the store or Prefect cannot be reached (the hub retries); the claim is released.
GET /healthz answers {"status": "ok"}; GET /metrics the Prometheus text.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from day0.errors import StoreError
from day0.store import open_store
from day0.webhook.dedupe import DedupeStore
from day0.webhook.metrics import WebhookMetrics
from day0.webhook.payload import HubPayload, decide
from day0.webhook.settings import WatchConfig, WebhookSettings, load_watch

__all__ = ["Trigger", "create_app", "prefect_trigger"]

log = logging.getLogger("day0.webhook")

# (deployment name, parameters, idempotency key) -> flow run id
Trigger = Callable[[str, dict[str, Any], str], Awaitable[str]]


async def prefect_trigger(deployment: str, parameters: dict[str, Any], idempotency_key: str) -> str:
    from prefect.deployments.flow_runs import arun_deployment

    run = await arun_deployment(
        deployment, parameters=parameters, timeout=0, idempotency_key=idempotency_key, as_subflow=False
    )
    return str(run.id)


class _Unavailable(Exception):
    """The store or Prefect could not be reached: 503, and the hub retries."""


class _Refused(Exception):
    def __init__(self, status: int, reason: str, detail: Any = None):
        self.status, self.reason, self.detail = status, reason, detail


async def _read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise _Refused(413, "too_large", f"body over {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _Refused(413, "too_large", f"body over {limit} bytes")
    return bytes(body)


def _parse(body: bytes) -> HubPayload:
    try:
        raw = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _Refused(400, "malformed_json", f"body is not JSON: {exc}") from None
    try:
        return HubPayload.model_validate(raw)
    except ValidationError as exc:
        fields = [{"field": ".".join(map(str, e["loc"])) or "<root>", "message": e["msg"]} for e in exc.errors()[:10]]
        raise _Refused(422, "invalid_payload", fields) from None


def create_app(
    settings: WebhookSettings, watch: WatchConfig | None = None, trigger: Trigger = prefect_trigger
) -> FastAPI:
    config = watch or load_watch(settings.watch)
    dedupe = DedupeStore(open_store(settings.store))
    metrics = WebhookMetrics()
    secret = settings.secret.get_secret_value().encode()
    triggering = asyncio.Semaphore(settings.max_concurrent_triggers)
    app = FastAPI(title="day0 webhook receiver", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.metrics = metrics

    async def handle(request: Request) -> tuple[int, dict[str, Any]]:
        given = request.headers.get("x-webhook-secret", "").encode()
        if not hmac.compare_digest(given, secret):
            raise _Refused(401, "bad_secret")
        payload = _parse(await _read_limited(request, settings.max_body_bytes))
        decision = decide(payload, config.watch)
        if not decision.start or decision.sha is None:
            metrics.ignored.labels(reason=decision.code).inc()
            log.info("ignored %s: %s", decision.repo, decision.reason)
            return 200, {"started": False, "reason": decision.reason}
        repo, sha = decision.repo, decision.sha
        try:
            claimed = dedupe.claim(repo, sha)
        except StoreError as exc:
            raise _Unavailable(f"dedupe store: {exc}") from exc
        if not claimed and dedupe.stale(repo, sha, settings.stale_claim_s):
            log.warning("stale claim for %s@%s (no run recorded): triggering again", repo, sha)
        elif not claimed:
            metrics.deduplicated.inc()
            known = dedupe.read(repo, sha) or {}
            log.info("duplicate %s@%s (flow run %s)", repo, sha, known.get("flow_run_id"))
            return 200, {"started": False, "reason": "duplicate", "flow_run_id": known.get("flow_run_id")}
        try:
            async with triggering:
                run_id = await trigger(config.deployment, {"spec": config.build_spec(repo, sha)}, f"{repo}@{sha}")
        except Exception as exc:  # Prefect unreachable, deployment missing...: give the claim back
            dedupe.release(repo, sha)
            raise _Unavailable(f"trigger {config.deployment}: {type(exc).__name__}: {exc}") from exc
        dedupe.record(repo, sha, run_id)
        metrics.accepted.inc()
        log.info("triggered %s for %s@%s: flow run %s", config.deployment, repo, sha, run_id)
        return 202, {"started": True, "reason": decision.reason, "repo": repo, "sha": sha, "flow_run_id": run_id}

    @app.post("/webhook")
    async def webhook(request: Request) -> Response:
        start = time.perf_counter()
        metrics.received.inc()
        try:
            status, body = await handle(request)
        except _Refused as exc:
            metrics.rejected.labels(reason=exc.reason).inc()
            log.warning("rejected a delivery: %s", exc.reason)
            status, body = exc.status, ({} if exc.status == 401 else {"error": exc.reason, "detail": exc.detail})
        except _Unavailable as exc:
            metrics.rejected.labels(reason="unavailable").inc()
            log.error("could not trigger a run (the hub will retry): %s", exc)
            status, body = 503, {"error": "unavailable", "detail": str(exc)}
        finally:
            metrics.latency.observe(time.perf_counter() - start)
        return JSONResponse(body, status_code=status)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return app
