"""The trial's progress: rank 0 says step, loss, tokens/s and ETA at a cadence (the first and last step,
then every N steps or every few seconds, whichever comes first), as one line the flow side reads into a
progress bar; and no library's progress bar reaches a step's log."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from day0.core.library_logs import quiet_known_library_logs
from day0.core.result import progress_fraction
from day0.steps.trial.loop import ProgressCadence
from day0.steps.trial.ray_train import ProgressRelay, RunEvent
from tests.fixtures.trial import tiny_loop


def _said(cadence: ProgressCadence, times: list[float]) -> list[int]:
    """The 1-based steps said, step i finishing at times[i - 1]."""
    return [step for step, now in enumerate(times, start=cadence.start + 1) if cadence.due(step, now) is not None]


def test_said_every_tenth_of_the_steps_at_the_first_and_at_the_last() -> None:
    cadence = ProgressCadence(tiny_loop(steps=95), start=0, now=0.0)  # a step a second: the 10 s rule never fires
    assert _said(cadence, [float(i) for i in range(1, 96)]) == [1, 10, 19, 28, 37, 46, 55, 64, 73, 82, 91, 95]


def test_said_every_ten_seconds_when_steps_are_slow() -> None:
    loop = tiny_loop(steps=1000, progress_every_steps=500)
    cadence = ProgressCadence(loop, start=200, now=100.0)  # resumed at step 200, 4 s a step
    assert _said(cadence, [100.0 + 4 * i for i in range(1, 10)]) == [201, 204, 207]


def test_throughput_and_eta() -> None:
    loop = tiny_loop(steps=10, progress_every_steps=4)  # 4 sequences x 32 tokens a step
    cadence = ProgressCadence(loop, start=0, now=0.0)
    assert cadence.due(1, 2.0) == {"step": 1, "steps": 10, "tokens_per_s": 64.0, "eta_s": 18.0}
    said = cadence.due(5, 6.0)  # 4 steps (512 tokens) in 4 s since the last line; 6 s for 5 steps so far
    assert said == {"step": 5, "steps": 10, "tokens_per_s": 128.0, "eta_s": pytest.approx(6.0)}


def test_the_line_says_how_far_the_step_is() -> None:
    event = RunEvent(time=0.0, kind="progress", step=12, steps=50, loss=4.12345, tokens_per_s=9876.5, eta_s=65.2)
    line = event.progress_line("candidate")
    assert line == "candidate: step 12/50, loss 4.1235, 9,876 tokens/s, ETA 1 min 5 s"
    assert progress_fraction(line) == pytest.approx(0.24)
    assert progress_fraction(f"[job] trial: {line}") == pytest.approx(0.24)  # relayed from a Ray job's log
    assert progress_fraction("reference: 40 steps on 1 CPU worker, fp32") is None


def test_no_library_progress_bar_once_quieted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """transformers' "Writing model shards" bar (step 6 writes the served model so) and huggingface_hub's
    bars leaked into the logs: after `quiet_known_library_logs` neither draws, and what this process starts
    (a vLLM engine, Ray's workers) inherits tqdm's and the hub's switches."""
    import huggingface_hub.utils as hub
    from transformers.utils import logging as transformers_logging

    hub_tqdm = sys.modules["huggingface_hub.utils.tqdm"]
    for variable in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(variable, raising=False)  # and restored after the test, as the globals below
    monkeypatch.setattr(hub_tqdm, "HF_HUB_DISABLE_PROGRESS_BARS", None)  # as read from an environment without it
    monkeypatch.setattr(hub_tqdm, "progress_bar_states", {})
    monkeypatch.setattr(transformers_logging, "_tqdm_active", True)

    def bars() -> str:
        list(transformers_logging.tqdm(range(3), desc="Writing model shards"))
        list(hub.tqdm(range(3), desc="Fetching files"))
        return capsys.readouterr().err

    assert "Writing model shards" in bars()  # the control: both draw before
    quiet_known_library_logs()
    drawn = bars()
    assert "Writing model shards" not in drawn and "Fetching files" not in drawn, drawn
    assert os.environ["TQDM_DISABLE"] == os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"


def test_the_relay_says_each_progress_line_of_its_run_and_the_last_one_on_leaving() -> None:
    """The driver waits in Ray Train's `fit()` while rank 0 records progress: a thread says each
    progress event as it comes, none recorded before the run (the reference's, in the shared log)."""
    recorded: list[dict] = [{"time": 0.0, "kind": "progress", "step": 9, "steps": 9, "loss": 1.0, "eta_s": 0}]
    said: list[str] = []
    first_said = threading.Event()

    def say(line: str) -> None:
        said.append(line)
        first_said.set()

    def progress(step: int) -> dict:
        return {
            "time": 1.0,
            "kind": "progress",
            "step": step,
            "steps": 3,
            "loss": 2.5,
            "tokens_per_s": 100.0,
            "eta_s": 3 - step,
        }

    with ProgressRelay(lambda i: recorded[i:], len(recorded), "candidate", say, poll_s=0.01):
        recorded += [{"time": 1.0, "kind": "started", "from_step": 0}, progress(1)]
        assert first_said.wait(timeout=30)  # said while the run goes on
        recorded += [progress(2), progress(3)]  # the last, recorded just before `fit()` returns
    assert said == [f"candidate: step {s}/3, loss 2.5000, 100 tokens/s, ETA {3 - s} s" for s in (1, 2, 3)]
