"""The `local` backend: a Ray cluster on this machine (or an existing one at `address`).

Contract: `connect` is idempotent; it starts Ray only when none is running in this process, with
token authentication off (`RAY_AUTH_MODE=disabled`, unless the environment says otherwise), no
dashboard, and the driver's log forwarding off so step logs stay readable. A `host:port` address
where nothing listens fails at once with `ConnectionError`: `ray.init` itself would retry for about
15 minutes (Ray 2.60: 20 tries of about 45 s each). A SIGTERM handler of the caller's (`day0 run`'s:
interrupted, exit 130) stays in place: `ray.init` replaces it with its own and a C++ one that makes
the driver abort (exit -6) as it exits. A SIGTERM while `ray.init` runs goes to the caller's handler too:
Ray's turned it into `SystemExit(15)`, which Prefect's engine records as a crash, so a cancel that
landed while Ray was starting ended Crashed and the recovery automation reran the run.

`interruptible` wraps a wait of the driver's main thread inside Ray (`ray.get`, a Ray Train fit): Ray's
signal check there passes on a handler's KeyboardInterrupt and SystemExit only and drops any other
exception (held to the wait's end, or lost), so Prefect's SIGTERM handler (its flow engine's: it raises
`TerminationSignal`) did not stop a run that was training until the training ended. The wait gets a
KeyboardInterrupt, and the handler's own exception is raised again once the wait is over: Prefect's
engine tells a runner's cancellation (SIGTERM with a cancel intent: the run ends Cancelled) from a kill
(Crashed) by its TerminationSignal, so a KeyboardInterrupt in its place made every cancelled deployment run
Crashed, which the recovery automation reschedules.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["connect", "interruptible"]


def connect(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    resources: dict[str, float] | None = None,
    namespace: str = "day0",
) -> str:
    """Connect to Ray (start a local instance if `address` is None, advertising `resources` beside
    what Ray detects itself); returns the GCS address."""
    import ray

    if not ray.is_initialized():
        caller_sigterm = signal.getsignal(signal.SIGTERM)
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        try:
            if address is None:
                # "local" always starts a private instance; a bare ray.init() would join any cluster
                # that `ray start` left on this machine.
                ray.init(
                    address="local",
                    num_cpus=num_cpus,
                    resources=resources,
                    namespace=namespace,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            else:
                _check_listening(address)
                ray.init(address=address, namespace=namespace, log_to_driver=False)
        except SystemExit as exc:
            # Ray's own handler (`sys.exit(signum)`) took a SIGTERM during start-up: the caller's decides
            if exc.code != signal.SIGTERM or not callable(caller_sigterm):
                raise
            caller_sigterm(signal.SIGTERM, None)
            raise
        finally:
            if callable(caller_sigterm) and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, caller_sigterm)
    return ray.get_runtime_context().gcs_address


def _check_listening(address: str, timeout_s: float = 5.0) -> None:
    """One TCP connect to a plain `host:port` (not `auto`, not a `ray://` client address)."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()  # [::1]:6379 too
    except OSError as exc:
        raise ConnectionError(f"no Ray cluster answers at {address}: {exc}") from None


@contextmanager
def interruptible() -> Iterator[None]:
    """While the body waits inside Ray, SIGTERM raises KeyboardInterrupt (from what the process's own
    handler raised): Ray's wait gives that up at once. Once the body is over, the handler's own exception
    is raised (from whatever the body ended with), and the handler is put back."""
    handler = signal.getsignal(signal.SIGTERM)
    if not callable(handler) or threading.current_thread() is not threading.main_thread():
        yield  # the default (the process ends) or no Python handler to convert
        return
    converted: list[BaseException] = []

    def raise_interrupt(signum: int, frame: FrameType | None) -> None:
        try:
            handler(signum, frame)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # e.g. Prefect's TerminationSignal, which Ray drops
            converted.append(exc)
            raise KeyboardInterrupt(f"signal {signum}") from exc

    signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    except BaseException as exc:
        if converted:
            raise converted[0] from exc
        raise
    finally:
        signal.signal(signal.SIGTERM, handler)
    if converted:  # the wait ended before Ray raised: the signal still takes effect
        raise converted[0]
