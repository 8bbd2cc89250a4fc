"""The Hugging Face webhook receiver: a FastAPI app that turns a new model commit into one run of the
adaptation deployment.

    DAY0_WEBHOOK_SECRET=... PREFECT_API_URL=... day0 webhook serve [--host 127.0.0.1] [--port 8765]

Contract, per POST /webhook (a 2xx means the delivery is handled for good; anything else the hub retries):
- 401 (empty body) unless exactly one X-Webhook-Secret header carries the secret's bytes (UTF-8,
  constant-time compare); 413 above `max_body_bytes`, counted while reading, before any parsing; 408
  when the body does not arrive within `body_timeout_s`; 400 for a body that is not JSON (also one
  nested too deeply to parse); 422 naming the field for a payload that is not a hub delivery.
- 200 with the reason for deliveries that start nothing (datasets, spaces, deletions, discussions,
  PR refs, repos outside the watch list), and for a repo+sha whose flow run exists (with its id).
- 202 once a new release is durably accepted: the claim (create-if-absent in the artifact store: one
  winner among concurrent copies, across restarts and replicas) and its queue entry are written; no
  Prefect call is made on the request path. The dispatcher (`day0.webhook.dispatch`) then creates the
  flow run (idempotency key repo@sha), records its id and retries until it has. A copy of a release
  still queued gets 202 too (`queued`, `duplicate`), and re-queues it if no live process holds it.
- 503 when the store cannot be reached or written in `store_timeout_s`; a claim won without its
  queue entry is released first, so the hub's retry claims it again. 503, before any claim, when
  the Prefect API is down (refuses connections, or its health endpoint fails): the hub retries, and
  the release runs once a retried delivery finds Prefect back. A Prefect that is only slow does not
  hold the answer: the release is queued and the dispatcher retries it.
Every refusal is one log line and counted in `day0_webhook_rejected_total{reason}`; a client hanging
up mid-body is counted as `disconnected`. Input is logged and echoed only through `safe.clean`.
GET /healthz answers {"status": "ok"}; GET /metrics the Prometheus text.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import JsonValue, ValidationError
from starlette.requests import ClientDisconnect

from day0.store import open_store
from day0.webhook.dedupe import DedupeStore
from day0.webhook.dispatch import Dispatcher, StoreCalls, Trigger, Unavailable
from day0.webhook.metrics import WebhookMetrics
from day0.webhook.payload import HubPayload, decide
from day0.webhook.safe import clean
from day0.webhook.settings import WatchConfig, WebhookSettings, load_watch
from day0.webhook.trigger import PrefectTrigger

__all__ = ["create_app"]

log = logging.getLogger("day0.webhook")
_SECRET_HEADER = b"x-webhook-secret"


class _Refused(Exception):
    def __init__(self, status: int, reason: str, detail: JsonValue = None):
        self.status, self.reason, self.detail = status, reason, detail


async def _read_limited(request: Request, limit: int, timeout_s: float) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise _Refused(413, "too_large", f"body over {limit} bytes")
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise _Refused(413, "too_large", f"body over {limit} bytes")
    except TimeoutError:
        raise _Refused(408, "body_timeout", f"body not received within {timeout_s:g} s") from None
    except ClientDisconnect:
        raise _Refused(400, "disconnected", "the client hung up before the body ended") from None
    return bytes(body)


def _parse(body: bytes) -> HubPayload:
    try:
        raw = json.loads(body)
    except RecursionError:
        raise _Refused(400, "malformed_json", "body is not JSON this receiver reads: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer over Python's digit limit
        raise _Refused(400, "malformed_json", f"body is not JSON: {clean(exc, 160)}") from None
    try:
        return HubPayload.model_validate(raw)
    except RecursionError:
        raise _Refused(422, "invalid_payload", "payload nested too deeply") from None
    except ValidationError as exc:
        fields: list[JsonValue] = [
            {"field": clean(".".join(map(str, e["loc"])) or "<root>", 120), "message": clean(e["msg"], 200)}
            for e in exc.errors(include_url=False, include_input=False)[:10]
        ]
        raise _Refused(422, "invalid_payload", fields) from None


def _secret_matches(request: Request, secret: bytes) -> bool:
    given = [value for name, value in request.scope["headers"] if name.lower() == _SECRET_HEADER]
    return len(given) == 1 and hmac.compare_digest(given[0], secret)


def create_app(settings: WebhookSettings, watch: WatchConfig | None = None, trigger: Trigger | None = None) -> FastAPI:
    config = watch or load_watch(settings.watch)
    config.template_spec()  # a template that is no spec refuses to start (SpecError), not every delivery
    dedupe = DedupeStore(open_store(settings.store))
    metrics = WebhookMetrics()
    secret = settings.secret.get_secret_value().encode()
    calls = StoreCalls(dedupe, settings.store_threads, settings.store_timeout_s)
    prefect = PrefectTrigger()
    dispatcher = Dispatcher(calls, trigger or prefect, config, settings, metrics)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await dispatcher.start()
        try:
            yield
        finally:
            await dispatcher.stop()
            await prefect.aclose()
            calls.close()

    app = FastAPI(title="day0 webhook receiver", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.metrics, app.state.dispatcher = metrics, dispatcher

    async def accept(repo: str, sha: str, reason: str) -> tuple[int, dict[str, JsonValue]]:
        """Claim the release and queue it; or answer for the claim that exists. Nothing is claimed while
        Prefect is down (503: the hub's retry claims it once Prefect is back)."""
        if trigger is None and (why := await prefect.down(settings.health_timeout_s)):
            raise Unavailable(f"the Prefect API is down ({clean(why, 200)}); nothing was claimed")
        answer: dict[str, JsonValue] = {"repo": repo, "sha": sha}
        for _ in range(2):  # a claim released by a failing peer between our two reads: claim again once
            if await calls.claim(repo, sha):
                try:
                    await calls(dedupe.enqueue, repo, sha)
                except Unavailable:
                    try:
                        await calls(dedupe.release, repo, sha)
                    except Unavailable as exc:  # left pending: the next copy queues it (see below)
                        log.warning("could not release the claim of %s@%s: %s", repo, sha, exc)
                    raise
                dispatcher.submit(repo, sha)
                metrics.accepted.inc()
                log.info("queued %s@%s (%s)", repo, sha, reason)
                return 202, {"started": True, "queued": True, "duplicate": False, "reason": reason, **answer}
            known = await calls(dedupe.read, repo, sha)
            if known is None:
                continue
            metrics.deduplicated.inc()
            answer = {"started": False, "duplicate": True, "reason": "duplicate", **answer}
            if run_id := known.get("flow_run_id"):
                log.info("duplicate %s@%s (flow run %s)", repo, sha, clean(str(run_id), 64))
                return 200, {**answer, "flow_run_id": run_id}
            if not dispatcher.holds(repo, sha):  # claimed elsewhere, or before a restart: make sure it runs
                await calls(dedupe.enqueue, repo, sha)
                dispatcher.submit(repo, sha)
            log.info("duplicate %s@%s (queued, no flow run yet)", repo, sha)
            return 202, {**answer, "queued": True}
        raise Unavailable(f"the claim of {repo}@{sha} is being released elsewhere")

    async def handle(request: Request) -> tuple[int, dict[str, JsonValue]]:
        if not _secret_matches(request, secret):
            raise _Refused(401, "bad_secret")
        payload = _parse(await _read_limited(request, settings.max_body_bytes, settings.body_timeout_s))
        decision = decide(payload, config.watch)
        if not decision.start or decision.sha is None:
            metrics.ignored.labels(reason=decision.code).inc()
            log.info("ignored %s: %s", decision.repo, clean(decision.reason, 300))
            return 200, {"started": False, "reason": clean(decision.reason, 300)}
        return await accept(decision.repo, decision.sha, decision.reason)

    @app.post("/webhook")
    async def webhook(request: Request) -> Response:
        start = time.perf_counter()
        metrics.received.inc()
        try:
            status, body = await handle(request)
        except _Refused as exc:
            metrics.rejected.labels(reason=exc.reason).inc()
            detail = "" if exc.detail is None else f": {clean(exc.detail, 300)}"
            log.warning("rejected a delivery (%d %s)%s", exc.status, exc.reason, detail)
            status, body = exc.status, ({} if exc.status == 401 else {"error": exc.reason, "detail": exc.detail})
        except Unavailable as exc:
            metrics.rejected.labels(reason="unavailable").inc()
            log.error("answered 503 (the hub will retry): %s", exc)
            status, body = 503, {"error": "unavailable", "detail": clean(exc, 300)}
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
