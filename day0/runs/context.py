"""A run of a spec: its identity, where its results live in the store, and its manifest.

Contract: a run's identity is the spec's fingerprint plus the day0 version (and its namespace when
not the users' `runs`), so rerunning the same spec lands in the same place and finds its completed
steps. A namespace is the run's top folder in the store: users' runs live under `runs/`; the
regression flow gives each of its runs one of its own, so it never reuses, rewrites or deletes
another run's files, nor sweeps another run's RayClusters (they are named by the run id). A step is
complete exactly when its `result.json` exists (written last, atomically) and its `code.json` names
the digest of the code that computes it now (`day0.provenance`): a step whose code changed is
recomputed, the others are reused. The manifest records each attempt, so a rerun can be seen to have
executed fewer steps; an attempt that was stopped (SIGTERM, Ctrl-C, even `kill -9`) lists the steps
it completed and the step it was running, as `interrupted`. Concurrent runs of one spec share the
run's folder safely: every record is its own object, written once, inside its attempt's own folder
(no read-modify-write), so none is lost and attempts never mix.
"""

import datetime as dt
import logging
import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

import day0
from day0.backends.base import Backend
from day0.backends.local.backend import LocalBackend
from day0.core.result import Verdict
from day0.errors import CorruptRecord
from day0.runs.folder import USER_RUNS, run_folder, run_id
from day0.spec.pipeline import PipelineSpec
from day0.store import ArtifactStore, open_store

__all__ = ["NAMESPACE_PATTERN", "USER_RUNS", "RunContext", "RunManifest", "RunSummary", "StepRecord"]

_ATTEMPTS, _BEGIN, _STARTED = "attempts", "begin.json", ".started.json"
# Where corrupt records of a run are moved aside (never listed with the attempts).
_CORRUPT = "corrupt"
# A started step with no record after its marker: killed too hard to record anything.
_UNFINISHED = "no result recorded: the run stopped while this step ran (killed), or it is still running"
# Slash-separated folder names; no segment starts with a dot, so none is `..`.
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)*$"


def _sortable_id() -> str:
    """Unique, and sorting by start time: nanoseconds since the epoch, then a random nonce."""
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"


class StepRecord(BaseModel):
    step: str
    status: Literal["executed", "cached", "failed", "skipped", "interrupted"] = Field(
        description="executed now, cached (reused from an earlier attempt), failed (raised), skipped (not run), "
        "interrupted (the run was stopped while the step ran; `seconds` is 0 when it was killed too hard to record)."
    )
    started_at: dt.datetime
    seconds: float
    verdict: Verdict | None = Field(None, description="The result's verdict; None when the step raised.")
    reasons: list[str] = Field(default=[])
    code: str | None = Field(None, description="Digest of the code that computed the result.")
    error: str | None = None


class _StartedMarker(BaseModel):
    """What `step_started` writes."""

    model_config = ConfigDict(extra="forbid")
    step: str
    started_at: dt.datetime


class RunManifest(BaseModel):
    name: str
    run_id: str
    day0_version: str
    attempts: list[list[StepRecord]] = Field(default=[], description="One list per flow run.")
    attempt_ids: list[str] = Field(default=[], description="The attempts' ids, in the same order.")

    def executed(self, attempt: int = -1) -> list[str]:
        return [r.step for r in self.attempts[attempt] if r.status == "executed"] if self.attempts else []

    def last(self) -> list[StepRecord]:
        return self.attempts[-1] if self.attempts else []


class RunContext(BaseModel):
    """What every step needs: the resolved spec, where this run's results go (`store`, opened once per
    context), and the backend its jobs run on (`backend`: the run's, inside
    `day0.backends.session.run_backend`; a local one outside it)."""

    spec: PipelineSpec
    run_id: str
    flow_run_id: str | None = None
    fresh: bool = Field(False, description="Recompute every step instead of reusing stored results.")
    attempt_id: str | None = Field(None, description="This flow run's attempt, set by `begin_attempt`.")
    namespace: str = Field(USER_RUNS, pattern=NAMESPACE_PATTERN, description="The run's top folder in the store.")
    _store: ArtifactStore | None = PrivateAttr(None)
    _backend: Backend | None = PrivateAttr(None)

    @classmethod
    def create(
        cls, spec: PipelineSpec, flow_run_id: str | None = None, fresh: bool = False, namespace: str = USER_RUNS
    ) -> "RunContext":
        return cls(spec=spec, run_id=run_id(spec, namespace), flow_run_id=flow_run_id, fresh=fresh, namespace=namespace)

    @property
    def prefix(self) -> str:
        return run_folder(self.spec, self.run_id, self.namespace)

    def key(self, *parts: str) -> str:
        return "/".join((self.prefix, *parts))

    @property
    def store(self) -> ArtifactStore:
        """The run's artifact store, opened on first use (on S3 one client for the whole run)."""
        if self._store is None:
            self._store = open_store(self.spec.storage)
        return self._store

    @property
    def backend(self) -> Backend:
        """Where the run's jobs run: the backend `use_backend` attached, else a local one."""
        return self._backend or LocalBackend(self.spec.cluster.address)

    def use_backend(self, backend: Backend | None) -> None:
        """Attach the run's backend (`run_backend` does, around the steps), or detach it with None."""
        self._backend = backend

    # --- manifest ---------------------------------------------------------------------------

    # Each attempt is a folder `attempts/<attempt_id>/` holding `begin.json` and one object per
    # record, `<time_ns>-<nonce>-<step>.json`, each written once and atomically: concurrent
    # writers never read-modify-write, so nothing is lost or mixed. Ids sort by start time. A step
    # that starts computing leaves a marker `<time_ns>-<nonce>-<step>.started.json`; one that no
    # record of its step follows reads as `interrupted` (the process was killed).
    # `manifest.json` is a derived view for people, rewritten when an attempt begins and ends and
    # when a step starts (`publish_manifest`), so after `kill -9` it lists what the attempt ran;
    # readers use `load_manifest()`, which reads the objects.

    def load_manifest(self) -> RunManifest:
        store = self.store
        attempts: dict[str, list[StepRecord]] = {}
        for key in store.list(self.key(_ATTEMPTS) + "/"):
            attempt, _, name = key.removeprefix(self.key(_ATTEMPTS) + "/").partition("/")
            records = attempts.setdefault(attempt, [])
            if name == _BEGIN:
                continue
            try:
                started = _StartedMarker.model_validate(store.get_json(key)) if name.endswith(_STARTED) else None
                record = StepRecord.model_validate(store.get_json(key)) if started is None else None
            except (CorruptRecord, ValidationError) as exc:
                self._move_aside(key, exc)
                continue
            if started is not None:
                records.append(StepRecord(status="interrupted", seconds=0.0, error=_UNFINISHED, **started.model_dump()))
            elif record is not None:
                records[:] = [r for r in records if not (r.step == record.step and r.error == _UNFINISHED)]
                records.append(record)
        ordered = [attempts[a] for a in sorted(attempts)]
        return RunManifest(
            name=self.spec.metadata.name,
            run_id=self.run_id,
            day0_version=day0.__version__,
            attempts=ordered,
            attempt_ids=sorted(attempts),
        )

    def _move_aside(self, key: str, exc: Exception) -> None:
        """A corrupt attempt record goes to the run's `corrupt/` folder, with a note: the run goes on
        without it (the manifest lists what it can read), and a person can still read it there."""
        if isinstance(exc, CorruptRecord):
            why = exc.why
        else:
            first = exc.errors()[0] if isinstance(exc, ValidationError) else None
            why = f"not a record: {first['loc']}: {first['msg']}" if first else str(exc)
        aside = self.store.move_aside(key, self.key(_CORRUPT, key.removeprefix(self.prefix + "/")))
        logging.getLogger("day0").warning(
            "%s was corrupt (%s): moved aside to %s; the run's manifest goes on without it",
            self.store.url(key),
            why,
            aside,
        )

    def begin_attempt(self) -> None:
        """Start a new attempt (this context's records go to it from now on)."""
        self.attempt_id = _sortable_id()
        begun = {"flow_run_id": self.flow_run_id, "started_at": dt.datetime.now(dt.UTC).isoformat()}
        self.store.put_json(self.key(_ATTEMPTS, self.attempt_id, _BEGIN), begun)
        self.store.put_json(self.key("spec.json"), self.spec.model_dump(mode="json"))
        self.publish_manifest()

    def record(self, record: StepRecord) -> None:
        """Add `record` to this context's attempt (beginning one if none was)."""
        if self.attempt_id is None:
            self.begin_attempt()
        assert self.attempt_id is not None
        key = self.key(_ATTEMPTS, self.attempt_id, f"{_sortable_id()}-{record.step}.json")
        self.store.put_json(key, record.model_dump(mode="json"))

    def step_started(self, step: str, started_at: dt.datetime) -> None:
        """Mark `step` as running in this context's attempt: with no record after it, it reads as
        interrupted. Republishes `manifest.json`, which then shows the steps before it too."""
        if self.attempt_id is None:
            self.begin_attempt()
        assert self.attempt_id is not None
        key = self.key(_ATTEMPTS, self.attempt_id, f"{_sortable_id()}-{step}{_STARTED}")
        self.store.put_json(key, {"step": step, "started_at": started_at.isoformat()})
        self.publish_manifest()

    def attempt_records(self, manifest: RunManifest | None = None) -> list[StepRecord]:
        """The records of this context's attempt (the latest attempt when it began none), from
        `manifest` when the caller holds one (else read from the store)."""
        manifest = manifest or self.load_manifest()
        if self.attempt_id is None or self.attempt_id not in manifest.attempt_ids:
            return manifest.last()
        return manifest.attempts[manifest.attempt_ids.index(self.attempt_id)]

    def publish_manifest(self) -> RunManifest:
        """Rewrite the `manifest.json` view from the attempt objects; return the manifest."""
        manifest = self.load_manifest()
        self.store.put_json(self.key("manifest.json"), manifest.model_dump(mode="json"))
        return manifest


class RunSummary(BaseModel):
    """What `day0 run --json` prints and the flow returns: where the run is and how each step ended."""

    run_id: str
    flow_run_id: str | None
    prefix: str
    steps: list[str] = Field(description="Steps this run planned, in pipeline order.")
    executed: list[str]
    reused: list[str]
    verdicts: dict[str, str] = Field(description="step -> pass | warn | fail | skipped | error.")
    failed: dict[str, list[str]] = Field(description="Failed steps (verdict fail, or raised) -> reasons.")
    report: dict[str, str]

    @classmethod
    def from_manifest(
        cls, ctx: RunContext, steps: list[str], report: dict[str, str], manifest: RunManifest | None = None
    ) -> "RunSummary":
        records = ctx.attempt_records(manifest)
        failed = {
            r.step: r.reasons if r.verdict == "fail" else [r.error or "raised"]
            for r in records
            if r.status == "failed" or r.verdict == "fail"
        }
        return cls(
            run_id=ctx.run_id,
            flow_run_id=ctx.flow_run_id,
            prefix=ctx.prefix,
            steps=steps,
            executed=[r.step for r in records if r.status == "executed"],
            reused=[r.step for r in records if r.status == "cached"],
            verdicts={r.step: r.verdict or "error" for r in records},
            failed=failed,
            report=report,
        )

    def overall_verdict(self) -> Verdict:
        """The run's verdict as its scorecard gives it: fail when a step failed or raised, else the
        worst step verdict (warn over skipped over pass)."""
        from day0.core.result import worst

        verdicts = list(self.verdicts.values())
        if self.failed or "error" in verdicts:
            return "fail"
        return worst(*verdicts)  # type: ignore[arg-type]  # "error" ruled out above: verdicts only

    def failure_message(self) -> str:
        parts = [f"{step}: {'; '.join(reasons[:3]) or 'failed'}" for step, reasons in self.failed.items()]
        return f"{len(self.failed)} step(s) failed: " + " | ".join(parts)
