"""A run of a spec: its identity, where its results live in the store, and its manifest.

Contract: a run's identity is the spec's fingerprint plus the day0 version, so rerunning the same
spec lands in the same place and finds its completed steps. A step is complete exactly when its
`result.json` exists (written last, atomically); the manifest records each attempt, so a rerun can
be seen to have executed fewer steps.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Literal

from pydantic import BaseModel, Field

import day0
from day0.spec import PipelineSpec
from day0.store import ArtifactStore, open_store

__all__ = ["RunContext", "RunManifest", "StepRecord"]


class StepRecord(BaseModel):
    step: str
    status: Literal["executed", "cached", "failed"]
    started_at: dt.datetime
    seconds: float
    error: str | None = None


class RunManifest(BaseModel):
    name: str
    run_id: str
    day0_version: str
    attempts: list[list[StepRecord]] = Field(default_factory=list, description="One list per flow run.")

    def executed(self, attempt: int = -1) -> list[str]:
        return [r.step for r in self.attempts[attempt] if r.status == "executed"] if self.attempts else []


class RunContext(BaseModel):
    """What every task needs: the resolved spec and where this run's results go."""

    spec: PipelineSpec
    run_id: str
    flow_run_id: str | None = None

    @classmethod
    def create(cls, spec: PipelineSpec, flow_run_id: str | None = None) -> RunContext:
        digest = hashlib.sha256(f"{spec.fingerprint()}:{day0.__version__}".encode()).hexdigest()[:12]
        return cls(spec=spec, run_id=digest, flow_run_id=flow_run_id)

    @property
    def prefix(self) -> str:
        return f"runs/{self.spec.metadata.name}/{self.run_id}"

    def key(self, *parts: str) -> str:
        return "/".join((self.prefix, *parts))

    def store(self) -> ArtifactStore:
        return open_store(self.spec.storage)

    # --- manifest ---------------------------------------------------------------------------

    def load_manifest(self) -> RunManifest:
        store, key = self.store(), self.key("manifest.json")
        if store.exists(key):
            return RunManifest.model_validate(store.get_json(key))
        return RunManifest(name=self.spec.metadata.name, run_id=self.run_id, day0_version=day0.__version__)

    def begin_attempt(self) -> None:
        manifest = self.load_manifest()
        manifest.attempts.append([])
        self.store().put_json(self.key("manifest.json"), manifest.model_dump(mode="json"))
        self.store().put_json(self.key("spec.json"), self.spec.model_dump(mode="json"))

    def record(self, record: StepRecord) -> None:
        manifest = self.load_manifest()
        if not manifest.attempts:
            manifest.attempts.append([])
        manifest.attempts[-1].append(record)
        self.store().put_json(self.key("manifest.json"), manifest.model_dump(mode="json"))
