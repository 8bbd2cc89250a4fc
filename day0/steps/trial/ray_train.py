"""One training run through Ray Train: TorchTrainer + ScalingConfig + RunConfig + FailureConfig.

Contract: a run is identified by (`storage_uri`, `name`); running it again with the same pair
resumes from its latest checkpoint (Ray Train V2 restores the run's checkpoint state), so a
completed run executes zero steps the second time. Checkpoints go to the artifact store: `file://DIR`
or `s3://bucket/prefix` (through pyarrow's S3 filesystem at `DAY0_STORE_ENDPOINT_URL`). Every
(re)start, failure, checkpoint and per-worker peak memory is recorded with a timestamp in an
`EventLog` actor pinned to the driver's node, which survives the loss of any worker node.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlparse

from pydantic import BaseModel, Field

from day0.backends.local.ray import interruptible
from day0.core import cancel
from day0.core.result import Progress
from day0.errors import Day0Error
from day0.settings import StoreSettings
from day0.steps.trial.loop import LoopConfig, LoopHooks, LoopStep, train_loop

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem
    from ray.actor import ActorHandle
    from ray.train.v2._internal.execution.controller import TrainController

__all__ = [
    "EventLog",
    "ProgressRelay",
    "RunEvent",
    "TrainingRun",
    "event_log",
    "is_deterministic",
    "ray_storage",
    "run_training",
]

EventKind = Literal["started", "first_step", "checkpoint", "failure", "memory", "finished", "node_killed", "progress"]
# How often the driver reads the workers' progress from the EventLog while a run trains.
RELAY_POLL_S = 1.0


class RunEvent(BaseModel):
    time: float = Field(description="Unix time, seconds.")
    kind: EventKind
    rank: int | None = None
    node_id: str | None = None
    step: int | None = None
    from_step: int | None = None
    peak_bytes: int | None = None
    baseline_bytes: int | None = None
    tensor_bytes: int | None = Field(None, description="Training memory counted from the tensors (trial.memory).")
    detail: str | None = None
    steps: int | None = Field(None, description="progress: the run's steps.")
    loss: float | None = Field(None, description="progress: the loss of `step`.")
    tokens_per_s: float | None = Field(None, description="progress: tokens/s since the progress before.")
    eta_s: float | None = Field(None, description="progress: seconds to the last step at this attempt's pace.")

    def progress_line(self, run: str) -> str:
        """A progress event as the trial's log says it:
        `candidate: step 12/50, loss 4.1234, 980 tokens/s, ETA 1 min 5 s`."""
        eta = round(self.eta_s or 0.0)
        when = f"{eta // 60} min {eta % 60} s" if eta >= 60 else f"{eta} s"
        return (
            f"{run}: step {self.step}/{self.steps}, loss {self.loss:.4f}, {self.tokens_per_s or 0.0:,.0f} tokens/s, "
            f"ETA {when}"
        )


Event = dict[str, float | str | None]  # a RunEvent as the EventLog keeps it


class EventLog:
    """A Ray actor collecting RunEvents from workers and the Train controller (see `event_log`)."""

    def __init__(self) -> None:
        self._events: list[Event] = []

    def record(self, kind: str, **fields: float | str | None) -> None:
        self._events.append({"time": time.time(), "kind": kind, **fields})

    def events(self) -> list[Event]:
        return list(self._events)

    def count(self) -> int:
        return len(self._events)

    def since(self, index: int) -> list[Event]:
        """The events recorded after the first `index` (what a poller has not read yet)."""
        return self._events[index:]


class ProgressRelay:
    """Says each progress event the workers record, as a line to `say`, while the driver waits in
    `fit()`: a thread reading the events past `start` through `since` (the EventLog's) every `poll_s`,
    in the caller's context (a Prefect run's logger and artifacts stay the run's). Leaving the block
    says what is left, so the last step is never lost."""

    def __init__(
        self, since: Callable[[int], list[Event]], start: int, run: str, say: Progress, poll_s: float = RELAY_POLL_S
    ) -> None:
        self.since, self.read, self.run, self.say, self.poll_s = since, start, run, say, poll_s
        self.done = threading.Event()
        self.thread = threading.Thread(
            target=contextvars.copy_context().run, args=(self._poll,), name=f"day0-{run}-progress", daemon=True
        )

    def __enter__(self) -> ProgressRelay:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if exc[0] is None:  # on an interrupt the thread ends by itself: a cancel waits for nothing
            self.thread.join(timeout=10 * self.poll_s)
            self._relay()

    def _poll(self) -> None:
        while not self.done.wait(self.poll_s):
            try:
                self._relay()
            except Exception:  # noqa: BLE001 - progress is best effort; the run's own outcome is what counts
                continue

    def _relay(self) -> None:
        new = self.since(self.read)
        self.read += len(new)
        for event in new:
            if event["kind"] == "progress":
                self.say(RunEvent.model_validate(event).progress_line(self.run))


def event_log() -> ActorHandle[EventLog]:
    """An EventLog actor on the driver's node (0 CPUs), so a worker-node kill cannot take it down."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    # ray's overloads type scheduling_strategy without NodeAffinitySchedulingStrategy, which it accepts
    return ray.remote(num_cpus=0, scheduling_strategy=here)(EventLog).remote()  # type: ignore[call-overload]


def _callback(log):
    from ray.train import UserCallback

    class _Events(UserCallback):
        """Runs in the Train controller: records failures and persisted checkpoints."""

        def after_report(self, run_context, metrics, checkpoint):
            if checkpoint is not None:
                log.record.remote("checkpoint", step=metrics[0].get("step"), detail=checkpoint.path)

        def after_exception(self, run_context, worker_exceptions):
            detail = "; ".join(
                f"rank {r}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                for r, e in worker_exceptions.items()
            )
            log.record.remote("failure", detail=detail[:500])

    return _Events()


class TrainingRun(BaseModel):
    """What one run did: its curve (all steps, restored ones included) and what happened on the way."""

    name: str
    storage_uri: str
    workers: int
    history: list[LoopStep]
    events: list[RunEvent]
    steps_executed: int = Field(description="Steps computed by this invocation (fewer when it resumed).")
    resumed_from_step: int = Field(description="Step the first attempt of this invocation started from.")
    wall_s: float
    checkpoint_path: str | None = None
    error: str | None = None

    @property
    def starts(self) -> list[RunEvent]:
        return [e for e in self.events if e.kind == "started" and e.rank == 0]

    @property
    def peak_memory_bytes(self) -> dict[int, int]:
        return {
            e.rank: e.peak_bytes
            for e in self.events
            if e.kind == "memory" and e.rank is not None and e.peak_bytes is not None
        }


def ray_storage(uri: str, settings: StoreSettings | None = None) -> tuple[str, FileSystem | None]:
    """(storage_path, storage_filesystem) for Ray Train's RunConfig from a store URI."""
    parsed = urlparse(uri)
    if parsed.scheme == "file" or not parsed.scheme:
        path = Path(parsed.netloc + parsed.path if parsed.scheme else uri).resolve()
        path.mkdir(parents=True, exist_ok=True)
        return str(path), None
    if parsed.scheme != "s3":
        raise ValueError(f"checkpoint storage {uri!r}: expected file:// or s3://")
    from pyarrow import fs

    s = settings or StoreSettings()
    kwargs: dict[str, str | None] = {
        "region": s.region,
        "access_key": s.access_key_id,
        "secret_key": s.secret_access_key,
    }
    if s.endpoint_url:
        endpoint = urlparse(s.endpoint_url)
        kwargs.update(endpoint_override=endpoint.netloc or endpoint.path, scheme=endpoint.scheme or "https")
    return f"{parsed.netloc}{parsed.path}".rstrip("/"), fs.S3FileSystem(**{k: v for k, v in kwargs.items() if v})


def run_training(
    loop: LoopConfig,
    tokens,
    *,
    name: str,
    storage_uri: str,
    workers: int = 1,
    use_gpu: bool = False,
    resources_per_worker: dict[str, float] | None = None,
    max_failures: int = 2,
    backend: str = "gloo",
    log=None,
    store_settings: StoreSettings | None = None,
    hooks: LoopHooks | None = None,
    progress: Progress | None = None,
) -> TrainingRun:
    """Run (or resume) `loop` on `workers` Ray Train workers (with `hooks` in every step, if given),
    saying rank 0's progress lines (step, loss, tokens/s, ETA) to `progress` as they come; never raises
    for training errors (the returned run carries `error`), so a caller can still report what was done."""
    import ray
    import torch
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.train.v2._internal.execution.failure_handling import FailureDecision, FailurePolicy
    from ray.train.v2.api.exceptions import TrainingFailedError as WorkerFailure

    class NoRetryOfDeterministic(FailurePolicy):
        """Ray Train's own policy, except that a worker's deterministic error ends the run at once: a retry
        would meet the same missing kernel or bad input again (issue 42: three retries, about 70 s)."""

        def __init__(self, inner: FailurePolicy) -> None:
            super().__init__(inner.failure_config)
            self.inner = inner

        def make_decision(self, training_failed_error: WorkerFailure) -> FailureDecision:
            failures = getattr(training_failed_error, "worker_failures", {})
            if any(is_deterministic(e) for e in failures.values()):
                return FailureDecision.RAISE
            return self.inner.make_decision(training_failed_error)

    class Trainer(TorchTrainer):
        controller: ActorHandle[TrainController] | None = None

        # Ray Train's SIGINT handler aborts the controller instead of raising, stays installed after the fit,
        # and calls sys.exit(0) once the controller is gone: Ctrl-C was exit 1, not an interrupt. Without it
        # Ctrl-C interrupts the trial as any step (KeyboardInterrupt: recorded as interrupted, exit 130).
        # Called with the controller before the fit waits on it: kept for a cancel to abort (`abort`).
        def _register_sigint_handler(self, controller: ActorHandle[TrainController]) -> None:
            self.controller = controller
            if cancel.requested():  # requested while the controller started: `abort` found none
                self.abort()

        def abort(self) -> None:
            """Ray Train's own abort (its Ctrl-C): the workers are stopped, and the fit's wait raises."""
            if self.controller is not None:
                self.controller.abort.remote()

        # Ray Train takes no failure policy from its public API: the one `fit` builds from FailureConfig
        # is wrapped on its way to the controller.
        def _initialize_and_run_controller(self, **kwargs: Any) -> Any:
            kwargs["failure_policy"] = NoRetryOfDeterministic(kwargs["failure_policy"])
            return super()._initialize_and_run_controller(**kwargs)  # type: ignore[misc]  # typed as Train V1's

    log = log or event_log()
    storage_path, filesystem = ray_storage(storage_uri, store_settings)
    resources = resources_per_worker or {"CPU": loop.num_threads}
    trainer = Trainer(
        train_loop,  # type: ignore[arg-type]  # its return value is kept (Result.return_value); ray types it None
        train_loop_config={**loop.model_dump(), "tokens": torch.as_tensor(tokens), "event_log": log, "hooks": hooks},
        torch_config=TorchConfig(backend=backend),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu, resources_per_worker=resources),
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            storage_filesystem=filesystem,
            failure_config=FailureConfig(max_failures=max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            callbacks=[_callback(log)],
        ),
    )
    t0 = time.time()
    try:
        # one log serves the reference and the candidate: the events before this run are not its own
        start = cast(int, ray.get(log.count.remote()))
        relay = ProgressRelay(lambda i: ray.get(log.since.remote(i)), start, name, progress or (lambda _line: None))
        # a cancel stops the fit from the canceller's thread: an interrupt alone can be lost in Ray's wait
        with interruptible(), relay, cancel.stopped_on_cancel(trainer.abort):
            result, error = trainer.fit(), None
    except TrainingFailedError as exc:  # retries exhausted: report what the checkpoints kept
        result, error = None, exc
    return _collect(result, error, log, filesystem, name=name, storage_uri=storage_uri, workers=workers, t0=t0)


def _last_checkpoint_history(events: list[RunEvent], filesystem) -> tuple[list[LoopStep], str | None]:
    import json

    from ray.train import Checkpoint

    saved = [e.detail for e in events if e.kind == "checkpoint" and e.detail]
    if not saved:
        return [], None
    with Checkpoint(saved[-1], filesystem).as_directory() as d:
        raw = json.loads((Path(d) / "history.json").read_text())
    return [LoopStep.model_validate(h) for h in raw], saved[-1]


def _collect(result, error, log, filesystem, *, name: str, storage_uri: str, workers: int, t0: float) -> TrainingRun:
    import ray

    # progress lines were said as they came; the run keeps what its result reads
    events = [
        RunEvent.model_validate(e) for e in ray.get(log.events.remote()) if e["time"] >= t0 and e["kind"] != "progress"
    ]
    if result is not None:
        history = [LoopStep.model_validate(h) for h in (result.return_value or [])]
        checkpoint_path = result.checkpoint.path if result.checkpoint else None
    else:
        history, checkpoint_path = _last_checkpoint_history(events, filesystem)
    starts = [e for e in events if e.kind == "started" and e.rank == 0]
    resumed = (starts[0].from_step or 0) if starts else 0
    executed = sum(_steps_until_next(starts, i, len(history)) for i in range(len(starts)))
    return TrainingRun(
        name=name,
        storage_uri=storage_uri,
        workers=workers,
        history=history,
        events=events,
        steps_executed=executed,
        resumed_from_step=resumed,
        wall_s=time.time() - t0,
        checkpoint_path=checkpoint_path,
        error=_error_line(error),
    )


def is_deterministic(error: BaseException) -> bool:
    """Whether a retry would meet `error` again: bad input (`Day0Error`) or a missing kernel
    (`NotImplementedError`: day0's `MissingKernelError`, and torch's "could not run ... backend"),
    found through Ray Train's wrapper of a worker's exception and the exception's causes."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, (Day0Error, NotImplementedError)):
            return True
        seen = getattr(seen, "_base_exc", None) or seen.__cause__
    return False


def _error_line(error: BaseException | None) -> str | None:
    """The innermost line of a Ray Train failure (the worker's own exception), not the whole traceback;
    a deterministic error says it was not retried."""
    if error is None:
        return None
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    failures = getattr(error, "worker_failures", {})
    why = " (deterministic: not retried)" if any(is_deterministic(e) for e in failures.values()) else ""
    return f"{type(error).__name__}{why}: {lines[-1] if lines else ''}"


def _steps_until_next(starts: list[RunEvent], i: int, total: int) -> int:
    """Steps attempt i contributed: up to where the next attempt resumed (or the end, for the last).
    Steps an attempt computed past its last checkpoint before failing are lost and not counted."""
    begin = starts[i].from_step or 0
    end = (starts[i + 1].from_step or 0) if i + 1 < len(starts) else total
    return max(end - begin, 0)
