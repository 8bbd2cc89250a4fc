"""The dedupe record of triggered runs, kept in the artifact store so it survives receiver restarts.

Contract: `claim(repo, sha)` is create-if-absent and atomic across processes: of any number of
concurrent claims for the same repo+sha exactly one returns True. File store: `os.open(O_CREAT |
O_EXCL)`. S3: a conditional PUT (`IfNoneMatch='*'`; the server answers 412 to the losers), then a
read-back after a short settle time that must find this claim's own nonce: some S3-compatible
servers (versitygw's posix backend, seen here) let several racing conditional PUTs succeed, the last
one winning the content, so only the writer whose body stayed has the claim. `record(...)` adds the
flow run id to a won claim; `release(...)` drops a claim whose trigger failed, so the hub's retry
can try again; `stale(...)` spots a claim whose receiver died before recording a run (the retry then
triggers again: Prefect's idempotency key keeps it to one run).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from typing import Any

from day0.errors import StoreError
from day0.store import ArtifactStore, FileStore, S3Store

__all__ = ["DedupeStore"]

_PREFIX = "webhook/claims"


class DedupeStore:
    def __init__(self, store: ArtifactStore):
        self.store = store

    @staticmethod
    def key(repo: str, sha: str) -> str:
        digest = hashlib.sha256(f"{repo}@{sha}".encode()).hexdigest()[:16]
        return f"{_PREFIX}/{repo.replace('/', '--')}/{sha}-{digest}.json"

    def claim(self, repo: str, sha: str) -> bool:
        """Create the record if absent; True for the one caller that created it."""
        record = {
            "repo": repo,
            "sha": sha,
            "flow_run_id": None,
            "claimed_at": time.time(),
            "nonce": secrets.token_hex(8),
        }
        key, body = self.key(repo, sha), json.dumps(record).encode()
        if isinstance(self.store, FileStore):
            return _claim_file(self.store, key, body)
        if isinstance(self.store, S3Store):
            return _claim_s3(self.store, key, body)
        raise StoreError(f"{type(self.store).__name__} has no atomic create-if-absent")

    def record(self, repo: str, sha: str, flow_run_id: str) -> None:
        self.store.put_json(self.key(repo, sha), {"repo": repo, "sha": sha, "flow_run_id": flow_run_id})

    def read(self, repo: str, sha: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.store.get_bytes(self.key(repo, sha)) or b"null")
        except (StoreError, json.JSONDecodeError):  # a claim being written, or none
            return None

    def stale(self, repo: str, sha: str, after_s: float) -> bool:
        """A claim without a run id older than `after_s`: its receiver died between claim and trigger."""
        known = self.read(repo, sha) or {}
        claimed_at = known.get("claimed_at")
        return known.get("flow_run_id") is None and claimed_at is not None and time.time() - claimed_at > after_s

    def release(self, repo: str, sha: str) -> None:
        key = self.key(repo, sha)
        if isinstance(self.store, FileStore):
            self.store.local_path(key).unlink(missing_ok=True)
        elif isinstance(self.store, S3Store):
            self.store.client.delete_object(Bucket=self.store.bucket, Key=self.store._key(key))


def _claim_file(store: FileStore, key: str, body: bytes) -> bool:
    path = store.local_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as fh:
        fh.write(body)
    return True


_S3_SETTLE_S = 0.3  # longer than racing PUTs that all passed the precondition take to land


def _claim_s3(store: S3Store, key: str, body: bytes) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        store.client.put_object(
            Bucket=store.bucket, Key=store._key(key), Body=body, ContentType="application/json", IfNoneMatch="*"
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            return False
        raise StoreError(f"cannot claim {store.url(key)}: {exc}") from None
    except BotoCoreError as exc:
        raise StoreError(f"cannot claim {store.url(key)}: {exc}") from None
    time.sleep(_S3_SETTLE_S)
    return bool(store.get_bytes(key) == body)
