"""A run's cancellation, as this process knows it: requested once (by the flow's watcher of its Prefect
state), read by the long waits of the steps, which stop what they wait on themselves.

Why not a signal alone: the watcher's SIGINT raises KeyboardInterrupt wherever the main thread is, and an
interrupt landing where it is not acted on (issue 42 item 5: three cancels in four, marked through
Prefect mid-trial, left the trial training to its end after "stopping") is lost for good. A wait that
registers its `stop` (Ray Train's controller abort) is ended by the request itself, from the watcher's
thread, and the body then raises KeyboardInterrupt: the same path as Ctrl-C (the step recorded as
interrupted, every `finally` run).

    with stopped_on_cancel(lambda: controller.abort.remote()):
        trainer.fit()
    raise_if_requested()  # between steps: a cancel never starts the next one
"""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["clear", "raise_if_requested", "request", "requested", "stopped_on_cancel"]

_requested = threading.Event()
_lock = threading.Lock()
_stops: list[Callable[[], None]] = []


def clear() -> None:
    """A new run in this process starts uncancelled."""
    _requested.clear()


def request() -> None:
    """Cancel the run: every registered wait's `stop` is called (here, in the caller's thread), once."""
    with _lock:
        if _requested.is_set():
            return
        _requested.set()
        stops = list(_stops)
    for stop in stops:
        try:
            stop()
        except Exception:  # noqa: BLE001 - a stop that failed must not keep the others from running
            continue


def requested() -> bool:
    return _requested.is_set()


def raise_if_requested() -> None:
    if _requested.is_set():
        raise KeyboardInterrupt("the run was cancelled")


@contextmanager
def stopped_on_cancel(stop: Callable[[], None]) -> Iterator[None]:
    """While the body runs, a cancel calls `stop`; once it was, the body ends in KeyboardInterrupt however it
    ended (`stop` typically makes the wait raise its own error). Cancelled already, the body is not run."""
    with _lock:
        raise_if_requested()
        _stops.append(stop)
    try:
        yield
    except Exception as exc:
        if _requested.is_set():
            raise KeyboardInterrupt("the run was cancelled") from exc
        raise
    finally:
        with _lock:
            _stops.remove(stop)
    raise_if_requested()
