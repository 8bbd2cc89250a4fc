"""Our own model of a Hugging Face webhook delivery, and the decision it leads to.

Contract: `HubPayload` validates what the hub sends (unknown fields are allowed, since the hub adds
fields over time; the ones we read are typed and required). `decide(payload, watch)` is pure: it says
whether the delivery starts an adaptation run (repo name + sha) or why it starts nothing; a reason
quotes input only escaped and cut (`day0.webhook.safe.clean`), and names at most three refs.
huggingface_hub's own payload model drops `repo.headSha`, which is the one thing we pin.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from day0.webhook.safe import clean

__all__ = ["Decision", "HubPayload", "WatchList", "decide"]

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_SHA = r"^[0-9a-f]{40}$"
_MAIN_REFS = ("refs/heads/main",)
_REFS_SHOWN = 3  # a reason names at most this many refs (a delivery may carry thousands)


class _HubModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class HubEvent(_HubModel):
    action: Literal["create", "update", "delete", "move"] = Field(description="What happened.")
    scope: Literal["repo", "repo.content", "repo.config", "discussion", "discussion.comment"] = Field(
        description="Which part of the repo it happened to."
    )


class HubRepo(_HubModel):
    type: Literal["model", "dataset", "space"] = Field(description="Repo kind.")
    name: str = Field(description="'org/name' repo id.", pattern=_REPO_ID.pattern)
    headSha: str | None = Field(None, pattern=_SHA, description="Commit at the head of main after the event.")


class UpdatedRef(_HubModel):
    ref: str = Field(description="e.g. refs/heads/main, refs/tags/v1, refs/pr/3.")
    oldSha: str | None = Field(None, pattern=_SHA)
    newSha: str | None = Field(None, pattern=_SHA)


class HubPayload(_HubModel):
    event: HubEvent
    repo: HubRepo
    updatedRefs: list[UpdatedRef] = Field(default=[])


class WatchList(BaseModel):
    """Which repos start a run: by org, or by 'org/name' glob pattern (fnmatch, case-sensitive)."""

    model_config = ConfigDict(extra="forbid")

    orgs: list[str] = Field(default=[], description="Every model repo of these orgs.")
    patterns: list[str] = Field(default=[], description="'org/name' globs, e.g. 'Qwen/Qwen3-*'.")

    def matches(self, repo: str) -> bool:
        return repo.split("/", 1)[0] in self.orgs or any(fnmatchcase(repo, p) for p in self.patterns)


class Decision(BaseModel):
    start: bool
    code: str = Field(description="Short fixed reason code (a metrics label): never input text.")
    reason: str
    repo: str
    sha: str | None = None


def _main_sha(payload: HubPayload) -> str | None:
    """The new main-branch commit of a content update, or None when main did not move."""
    for ref in payload.updatedRefs:
        if ref.ref in _MAIN_REFS and ref.newSha:
            return ref.newSha
    return None


def decide(payload: HubPayload, watch: WatchList) -> Decision:
    repo, event = payload.repo, payload.event

    def ignore(code: str, reason: str) -> Decision:
        return Decision(start=False, code=code, reason=reason, repo=repo.name)

    def start(code: str, reason: str, sha: str) -> Decision:
        return Decision(start=True, code=code, reason=reason, repo=repo.name, sha=sha)

    if repo.type != "model":
        return ignore(f"{repo.type}_repo", f"{repo.type} repos start nothing")
    if not watch.matches(repo.name):
        return ignore("not_watched", f"{repo.name} is not in the watch list")
    if event.scope.startswith("discussion"):
        return ignore("discussion", f"{event.scope} events start nothing")
    if event.action in ("delete", "move"):
        return ignore(event.action, f"repo {event.action} starts nothing")
    if event.scope == "repo" and event.action == "create":
        sha = _main_sha(payload) or repo.headSha
        if sha is None:
            return ignore("no_commit", "new repo without a commit yet (no headSha)")
        return start("new_repo", "new model repo", sha)
    if event.scope == "repo.content" and event.action == "update":
        sha = _main_sha(payload)
        if sha is None:
            refs = ", ".join(clean(r.ref, 80) for r in payload.updatedRefs[:_REFS_SHOWN]) or "none"
            if len(payload.updatedRefs) > _REFS_SHOWN:
                refs += f" and {len(payload.updatedRefs) - _REFS_SHOWN} more"
            return ignore("not_main", f"no new commit on main (updated refs: {refs})")
        return start("new_commit", "new commit on main", sha)
    return ignore("other_event", f"{event.scope} {event.action} events start nothing")
