"""List-then-watch of one kind of API object, resumed by resourceVersion (client-go's reflector).

Contracts:
- `ResourceWatch` lists once, yields ADDED for each listed object and then SYNCED, and watches from
  the list's resourceVersion. Every event, bookmarks included (not yielded), advances that version,
  so when a watch window ends (the server's `timeoutSeconds`) the next one resumes where it left
  off: no relist, no repeated events.
- 410 Gone (the server no longer holds our version) relists and diffs against what was seen:
  objects that vanished meanwhile come out as DELETED, changed ones as MODIFIED, new ones as ADDED,
  then SYNCED again. A consumer sees one consistent stream whatever happened to the connection.
- Other API or connection errors are raised, or, given `on_error`, reported to it and retried
  with backoff from the same version.
- `.objects` (uid -> object) is what the stream has said so far. `deadline` (a `time.monotonic()`
  value) ends the iteration; `stop()`, from any thread, ends it at once (the socket is shut).
Objects are `kubernetes.client` models for typed list calls and dicts for custom objects.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, TypeAlias

from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

__all__ = ["ApiObject", "EventType", "ResourceWatch"]

EventType = Literal["ADDED", "MODIFIED", "DELETED", "SYNCED"]
# What a list call returns and a watch yields: a `kubernetes.client` model (V1PodList, V1Pod, CoreV1Event)
# for typed calls, a plain dict for custom objects; the watch stream's events are untyped.
ApiObject: TypeAlias = Any
_GONE = 410
_LIST_TIMEOUT_S = 60


def _meta(obj: ApiObject, field: Literal["uid", "resourceVersion"]) -> str | None:
    if isinstance(obj, Mapping):
        return (obj.get("metadata") or {}).get(field)
    return getattr(obj.metadata, "uid" if field == "uid" else "resource_version", None)


def _uid(obj: ApiObject) -> str:
    return _meta(obj, "uid") or ""


class ResourceWatch:
    """`for kind, obj in ResourceWatch(core.list_namespaced_pod, "day0", label_selector=...)`."""

    def __init__(
        self,
        list_fn: Callable[..., ApiObject],
        *args: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        deadline: float | None = None,
        window_s: int = 60,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self._list, self._args = list_fn, args
        self._kwargs = {k: v for k, v in (("label_selector", label_selector), ("field_selector", field_selector)) if v}
        self._deadline, self._window_s, self._on_error = deadline, window_s, on_error
        self.objects: dict[str, ApiObject] = {}
        self.resource_version: str | None = None
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None

    def stop(self) -> None:
        self._stop.set()
        if (current := self._watch) is not None:
            current.stop()

    def _left(self) -> float:
        return float("inf") if self._deadline is None else self._deadline - time.monotonic()

    def __iter__(self) -> Iterator[tuple[EventType, ApiObject]]:
        failures = 0
        while not self._stop.is_set() and self._left() > 0:
            try:
                if self.resource_version is None:
                    yield from self._relist()
                yield from self._follow()
                failures = 0
            except Exception as exc:
                if self._stop.is_set():
                    return  # a stream cut by stop() ends however it ends
                if isinstance(exc, ApiException) and exc.status == _GONE:
                    self.resource_version = None  # our version was compacted away: list again
                    continue
                if self._on_error is None or not isinstance(exc, ApiException | HTTPError | OSError):
                    raise
                self._on_error(exc)  # the API or the connection failed: resume from our version
                self._stop.wait(min(0.5 * 2**failures, 30.0, max(self._left(), 0.0)))
                failures += 1

    def _relist(self) -> Iterator[tuple[EventType, ApiObject]]:
        listed = self._list(*self._args, _request_timeout=_LIST_TIMEOUT_S, **self._kwargs)
        items = listed["items"] if isinstance(listed, Mapping) else listed.items
        version = _meta(listed, "resourceVersion")
        fresh = {_uid(obj): obj for obj in items}
        for uid in [u for u in self.objects if u not in fresh]:
            yield "DELETED", self.objects.pop(uid)
        for uid, obj in fresh.items():
            old = self.objects.get(uid)
            self.objects[uid] = obj
            if old is None:
                yield "ADDED", obj
            elif _meta(old, "resourceVersion") != _meta(obj, "resourceVersion"):
                yield "MODIFIED", obj
        self.resource_version = version
        yield "SYNCED", None

    def _follow(self) -> Iterator[tuple[EventType, ApiObject]]:
        window = int(max(1, min(self._window_s, self._left())))
        self._watch = current = watch.Watch()
        stream = current.stream(
            self._list,
            *self._args,
            resource_version=self.resource_version,
            timeout_seconds=window,
            allow_watch_bookmarks=True,
            _request_timeout=window + 30,
            **self._kwargs,
        )
        try:
            for event in stream:
                version = _meta(event["raw_object"], "resourceVersion")
                self.resource_version = version or self.resource_version
                if event["type"] == "BOOKMARK":
                    continue
                obj = event["object"]
                if event["type"] == "DELETED":
                    self.objects.pop(_uid(obj), None)
                else:
                    self.objects[_uid(obj)] = obj
                if self._stop.is_set():
                    return
                yield event["type"], obj
        finally:
            self._watch = None
            stream.close()
