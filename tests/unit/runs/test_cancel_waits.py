"""A cancel stops the steps' long waits by itself, with no signal (issue 42 item 5: the watcher's SIGINT was
lost mid-trial and the trial trained to its end). Real Ray Train workers, a real engine process."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from day0.core import cancel
from day0.steps.inference.server import EngineConfig, Server
from tests.fixtures.trial import tiny_data, tiny_loop


@pytest.fixture(autouse=True)
def uncancelled() -> Iterator[None]:
    cancel.clear()
    yield
    cancel.clear()


def _cancel_when(started: threading.Event, requested_at: list[float]) -> None:
    def request() -> None:
        if started.wait(120):
            requested_at.append(time.monotonic())
            cancel.request()

    threading.Thread(target=request, daemon=True).start()


def test_a_cancel_calls_the_waits_stop_and_the_wait_ends_in_an_interrupt() -> None:
    stopped = threading.Event()

    def wait_until_stopped() -> None:  # a wait that its stop makes raise its own error (Ray's ActorDiedError)
        if not stopped.wait(30):
            raise AssertionError("the wait was never stopped")
        raise RuntimeError("the actor died")

    with pytest.raises(KeyboardInterrupt) as raised, cancel.stopped_on_cancel(stopped.set):
        threading.Thread(target=cancel.request).start()  # the watcher's thread
        wait_until_stopped()
    assert isinstance(raised.value.__cause__, RuntimeError)
    with pytest.raises(KeyboardInterrupt), cancel.stopped_on_cancel(stopped.set):  # cancelled: no new wait starts
        raise AssertionError("the body ran after the cancel")


@pytest.mark.integration
def test_a_cancel_aborts_a_ray_train_fit_at_its_first_step(local_ray: None, tmp_path: Path) -> None:
    from day0.steps.trial.ray_train import run_training

    first_step, requested_at, lines = threading.Event(), [], []

    def progress(line: str) -> None:
        lines.append(line)
        first_step.set()

    _cancel_when(first_step, requested_at)
    with pytest.raises(KeyboardInterrupt):
        run_training(
            tiny_loop(400, progress_every_steps=1),
            tiny_data().tokens,
            name="cancelled",
            storage_uri=f"file://{tmp_path}",
            progress=progress,
        )
    took = time.monotonic() - requested_at[0]
    print(f"the fit ended {took:.1f} s after the cancel, at {lines[-1]!r}")
    assert took < 15, f"the fit went on {took:.0f} s after the cancel"
    assert "step 400/400" not in "\n".join(lines)


class _Silent(Server):
    """An engine that starts and never answers /health."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(600)"]


def test_a_cancel_stops_waiting_for_an_engine_to_answer(tmp_path: Path) -> None:
    server = _Silent(EngineConfig(model_dir=tmp_path / "model", startup_timeout_s=300), tmp_path)
    launched, requested_at = threading.Event(), []

    def watch() -> None:
        deadline = time.monotonic() + 30
        while server.process is None and time.monotonic() < deadline:
            time.sleep(0.05)
        launched.set()

    threading.Thread(target=watch, daemon=True).start()
    _cancel_when(launched, requested_at)
    try:
        with pytest.raises(KeyboardInterrupt):
            server.start()
        assert time.monotonic() - requested_at[0] < 5
    finally:
        server.stop()
    assert server.process is not None and server.process.poll() is not None
