"""A run of a spec: its identity, where its results live in the store, and its manifest.

Contract: a run's identity is the spec's fingerprint plus the day0 version, so rerunning the same
spec lands in the same place and finds its completed steps. A step is complete exactly when its
`result.json` exists (written last, atomically) and its `code.json` names the digest of the code
that computes it now (`day0.provenance`): a step whose code changed is recomputed, the others are
reused. The manifest records each attempt, so a rerun can be seen to have executed fewer steps.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Literal

from pydantic import BaseModel, Field

import day0
from day0.core.result import Verdict
from day0.spec import PipelineSpec
from day0.store import ArtifactStore, open_store

__all__ = ["RunContext", "RunManifest", "RunSummary", "StepRecord"]


class StepRecord(BaseModel):
    step: str
    status: Literal["executed", "cached", "failed", "skipped"] = Field(
        description="executed now, cached (reused from an earlier attempt), failed (raised), skipped (not run).")
    started_at: dt.datetime
    seconds: float
    verdict: Verdict | None = Field(None, description="The result's verdict; None when the step raised.")
    reasons: list[str] = Field(default_factory=list)
    code: str | None = Field(None, description="Digest of the code that computed the result.")
    error: str | None = None


class RunManifest(BaseModel):
    name: str
    run_id: str
    day0_version: str
    attempts: list[list[StepRecord]] = Field(default_factory=list, description="One list per flow run.")

    def executed(self, attempt: int = -1) -> list[str]:
        return [r.step for r in self.attempts[attempt] if r.status == "executed"] if self.attempts else []

    def last(self) -> list[StepRecord]:
        return self.attempts[-1] if self.attempts else []


class RunContext(BaseModel):
    """What every task needs: the resolved spec and where this run's results go."""

    spec: PipelineSpec
    run_id: str
    flow_run_id: str | None = None
    fresh: bool = Field(False, description="Recompute every step instead of reusing stored results.")

    @classmethod
    def create(cls, spec: PipelineSpec, flow_run_id: str | None = None, fresh: bool = False) -> RunContext:
        digest = hashlib.sha256(f"{spec.fingerprint()}:{day0.__version__}".encode()).hexdigest()[:12]
        return cls(spec=spec, run_id=digest, flow_run_id=flow_run_id, fresh=fresh)

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
    def from_manifest(cls, ctx: RunContext, steps: list[str], report: dict[str, str]) -> RunSummary:
        records = ctx.load_manifest().last()
        failed = {r.step: r.reasons if r.verdict == "fail" else [r.error or "raised"]
                  for r in records if r.status == "failed" or r.verdict == "fail"}
        return cls(run_id=ctx.run_id, flow_run_id=ctx.flow_run_id, prefix=ctx.prefix, steps=steps,
                   executed=[r.step for r in records if r.status == "executed"],
                   reused=[r.step for r in records if r.status == "cached"],
                   verdicts={r.step: r.verdict or "error" for r in records}, failed=failed, report=report)

    def failure_message(self) -> str:
        parts = [f"{step}: {'; '.join(reasons[:3]) or 'failed'}" for step, reasons in self.failed.items()]
        return f"{len(self.failed)} step(s) failed: " + " | ".join(parts)
