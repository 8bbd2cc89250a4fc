"""Creating the flow run of a release on the Prefect server at PREFECT_API_URL.

Contract: `prefect_api_url()` is the configured API URL (environment or Prefect profile) or None; the
receiver refuses to start without one, so it never starts a temporary Prefect server of its own
(which would hold no deployment and outlive a killed receiver). `PrefectTrigger` keeps one client
for the process and caches each deployment's id (dropped when Prefect says it is gone), so a trigger is
one API call: `create_flow_run_from_deployment(..., idempotency_key=repo@sha)`, which returns the
existing run for a key already used. `down()` tells a Prefect API that refuses connections (or whose
health endpoint fails) from one that is merely slow; concurrent deliveries share one health check on one
HTTP client (a client per check builds an SSL context each time, which holds the event loop for tens of
milliseconds: a burst of deliveries stalled `/healthz` for over a second).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    import httpx
    from prefect.client.orchestration import PrefectClient
    from pydantic import JsonValue

__all__ = ["PrefectTrigger", "prefect_api_url"]


def prefect_api_url() -> str | None:
    from prefect.settings import PREFECT_API_URL

    value = PREFECT_API_URL.value()
    return str(value) if value else None


class PrefectTrigger:
    def __init__(self) -> None:
        self.client: PrefectClient | None = None
        self.deployments: dict[str, UUID] = {}
        self.opening = asyncio.Lock()
        self.http: httpx.AsyncClient | None = None
        self.checking: asyncio.Future[str | None] | None = None  # the health check in flight

    async def _client(self) -> PrefectClient:
        async with self.opening:  # concurrent first calls share one client
            if self.client is None:
                from prefect.client.orchestration import get_client

                if prefect_api_url() is None:  # never the ephemeral server: see the module contract
                    raise RuntimeError("PREFECT_API_URL is not set")
                client = get_client()
                await client.__aenter__()
                self.client = client
            return self.client

    async def __call__(self, deployment: str, parameters: dict[str, JsonValue], idempotency_key: str) -> str:
        from prefect.exceptions import ObjectNotFound

        client = await self._client()
        if deployment not in self.deployments:
            try:
                self.deployments[deployment] = (await client.read_deployment_by_name(deployment)).id
            except ObjectNotFound:
                raise LookupError(f"no deployment {deployment!r} on {prefect_api_url()}") from None
        try:
            run = await client.create_flow_run_from_deployment(
                self.deployments[deployment], parameters=parameters, idempotency_key=idempotency_key
            )
        except ObjectNotFound:
            self.deployments.pop(deployment, None)  # deleted (or re-created under a new id) since cached
            raise
        return str(run.id)

    async def down(self, timeout_s: float) -> str | None:
        """Why the Prefect API is down (refused, unresolvable, or its health endpoint failing), or None.
        A health check that only times out is not "down": a hung server must not slow the answer, and
        the dispatcher's retries carry a queued release through it."""
        if self.checking is None:
            self.checking = asyncio.ensure_future(self._check_health(timeout_s))
            self.checking.add_done_callback(lambda _: setattr(self, "checking", None))
        return await asyncio.shield(self.checking)

    async def _check_health(self, timeout_s: float) -> str | None:
        import httpx

        if self.http is None:
            self.http = httpx.AsyncClient(timeout=timeout_s)
        url = f"{str(prefect_api_url() or '').rstrip('/')}/health"
        try:
            answer = await self.http.get(url)
        except httpx.TimeoutException:
            return None
        except httpx.HTTPError as exc:
            return f"{url}: {type(exc).__name__}: {exc}"
        return None if answer.status_code < 500 else f"{url}: HTTP {answer.status_code}"

    async def aclose(self) -> None:
        if self.http is not None:
            http, self.http = self.http, None
            await http.aclose()
        if self.client is not None:
            client, self.client = self.client, None
            await client.__aexit__(None, None, None)
