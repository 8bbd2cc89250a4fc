"""Off the event loop: blocking store calls with timeouts, and the dispatcher that turns queued releases
into flow runs.

Contract:
- `StoreCalls(dedupe, threads, timeout_s)`: `await calls(fn, *args)` runs a `DedupeStore` method in a
  thread pool of its own and raises `Unavailable` (one line: what failed and why) when it raises or
  takes longer than `timeout_s`; `claim(repo, sha)` waits the S3 settle time with `asyncio.sleep`.
- `Dispatcher`: `submit(repo, sha)` puts an accepted release on the in-memory queue (once per process);
  `max_concurrent_triggers` workers create its flow run (`trigger`, with Prefect's idempotency key
  `repo@sha`, under `trigger_timeout_s`), record the run id in the claim and delete the queue entry.
  A failure (Prefect down, hung, deployment missing, store unreachable) is one log line, and the
  release is tried again after a backoff (1 s doubling to `retry_max_s`), never dropped. `start()`
  resumes every entry left in the store's queue (a receiver killed after answering 202); every
  `rescan_s` the queue is listed again and entries seen in two scans that this process does not hold
  (another receiver's, left behind) are taken too: the idempotency key keeps that to one run.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar, TypeVarTuple

from pydantic import JsonValue

from day0.store import S3Store
from day0.webhook.dedupe import S3_SETTLE_S, DedupeStore
from day0.webhook.metrics import WebhookMetrics
from day0.webhook.safe import clean
from day0.webhook.settings import WatchConfig, WebhookSettings

__all__ = ["Dispatcher", "StoreCalls", "Trigger", "Unavailable"]

log = logging.getLogger("day0.webhook")
T = TypeVar("T")
Args = TypeVarTuple("Args")

# (deployment name, parameters, idempotency key) -> flow run id
Trigger = Callable[[str, dict[str, JsonValue], str], Awaitable[str]]


class Unavailable(Exception):
    """The store (or Prefect) could not be reached in time: 503, and the hub retries."""


class StoreCalls:
    def __init__(self, dedupe: DedupeStore, threads: int, timeout_s: float):
        self.dedupe, self.timeout_s = dedupe, timeout_s
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="day0-webhook-store")

    async def __call__(self, fn: Callable[[*Args], T], *args: *Args) -> T:
        loop = asyncio.get_running_loop()
        name = getattr(fn, "__name__", "store call")
        try:
            return await asyncio.wait_for(loop.run_in_executor(self.pool, functools.partial(fn, *args)), self.timeout_s)
        except TimeoutError:
            raise Unavailable(f"store {name}: no answer within {self.timeout_s:g} s") from None
        except Exception as exc:  # noqa: BLE001 - StoreError, OSError, botocore's errors: all mean 'retry later'
            raise Unavailable(f"store {name}: {type(exc).__name__}: {clean(exc, 300)}") from None

    async def claim(self, repo: str, sha: str) -> bool:
        body = await self(self.dedupe.put_claim, repo, sha)
        if body is None:
            return False
        if isinstance(self.dedupe.store, S3Store):
            await asyncio.sleep(S3_SETTLE_S)
        return await self(self.dedupe.claim_held, repo, sha, body)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class Dispatcher:
    def __init__(
        self,
        calls: StoreCalls,
        trigger: Trigger,
        config: WatchConfig,
        settings: WebhookSettings,
        metrics: WebhookMetrics,
    ):
        self.calls, self.trigger, self.config, self.settings, self.metrics = calls, trigger, config, settings, metrics
        self.queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.held: set[tuple[str, str]] = set()  # submitted and not finished, in this process
        self.attempts: dict[tuple[str, str], int] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.retries: set[asyncio.Task[None]] = set()

    def holds(self, repo: str, sha: str) -> bool:
        return (repo, sha) in self.held

    def submit(self, repo: str, sha: str) -> bool:
        """Queue a release for triggering; False when this process already holds it."""
        if (repo, sha) in self.held:
            return False
        self.held.add((repo, sha))
        self.queue.put_nowait((repo, sha))
        self.metrics.queued.set(len(self.held))
        return True

    async def start(self) -> None:
        self.tasks = [asyncio.create_task(self._worker()) for _ in range(self.settings.max_concurrent_triggers)]
        self.tasks.append(asyncio.create_task(self._rescan()))

    async def stop(self) -> None:
        for task in [*self.tasks, *self.retries]:
            task.cancel()
        await asyncio.gather(*self.tasks, *self.retries, return_exceptions=True)

    async def _resume(self, seen_before: set[tuple[str, str]] | None) -> set[tuple[str, str]]:
        """Submit queue entries from the store: all of them at start-up (`seen_before` None), else those
        also seen by the previous scan. Returns this scan's entries."""
        try:
            entries = set(await self.calls(self.calls.dedupe.queued))
        except Unavailable as exc:
            log.warning("cannot list the queue (retried in %g s): %s", self.settings.rescan_s, exc)
            return seen_before or set()
        taken = [e for e in sorted(entries) if (seen_before is None or e in seen_before) and self.submit(*e)]
        if taken:
            what = "resumed" if seen_before is None else "took over"
            log.info("%s %d queued release(s) from the store", what, len(taken))
        return entries

    async def _rescan(self) -> None:
        seen = await self._resume(None)
        while True:
            await asyncio.sleep(self.settings.rescan_s)
            seen = await self._resume(seen)

    async def _worker(self) -> None:
        while True:
            repo, sha = await self.queue.get()
            try:
                await self._dispatch(repo, sha)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a release is never dropped: one line, then a retry
                self._retry(repo, sha, f"{type(exc).__name__}: {clean(exc, 300)}")

    async def _dispatch(self, repo: str, sha: str) -> None:
        key = f"{repo}@{sha}"
        try:
            params: dict[str, JsonValue] = {"spec": self.config.build_spec(repo, sha)}
            run_id = await asyncio.wait_for(
                self.trigger(self.config.deployment, params, key), self.settings.trigger_timeout_s
            )
        except TimeoutError:
            self._retry(repo, sha, f"Prefect gave no answer within {self.settings.trigger_timeout_s:g} s")
            return
        except Exception as exc:  # noqa: BLE001 - Prefect unreachable, deployment missing...: retried later
            self._retry(repo, sha, f"trigger {self.config.deployment}: {type(exc).__name__}: {clean(exc, 300)}")
            return
        try:
            await self.calls(self.calls.dedupe.record, repo, sha, run_id)
            await self.calls(self.calls.dedupe.dequeue, repo, sha)
        except Unavailable as exc:  # the run exists; the retry's trigger returns the same run (same key)
            self._retry(repo, sha, f"flow run {run_id} created, not recorded: {exc}")
            return
        self.held.discard((repo, sha))
        self.attempts.pop((repo, sha), None)
        self.metrics.queued.set(len(self.held))
        self.metrics.triggered.inc()
        log.info("triggered %s for %s: flow run %s", self.config.deployment, key, run_id)

    def _retry(self, repo: str, sha: str, why: str) -> None:
        tries = self.attempts[(repo, sha)] = self.attempts.get((repo, sha), 0) + 1
        delay = min(self.settings.retry_max_s, 2.0 ** (tries - 1))
        self.metrics.trigger_failures.inc()
        log.warning("could not trigger %s@%s (try %d; again in %g s): %s", repo, sha, tries, delay, why)

        async def later() -> None:
            await asyncio.sleep(delay)
            self.queue.put_nowait((repo, sha))

        task = asyncio.create_task(later())
        self.retries.add(task)
        task.add_done_callback(self.retries.discard)
