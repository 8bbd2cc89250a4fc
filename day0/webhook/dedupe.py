"""Claims and the durable queue of accepted releases, kept in the artifact store so they survive restarts.

Blocking calls (boto3, the filesystem): `day0.webhook.dispatch.StoreCalls` runs them off the event
loop, with timeouts.

Contract:
- `claim(repo, sha)` is create-if-absent and atomic across processes: of any number of concurrent
  claims for the same repo+sha exactly one returns True. File store: a temp file hard-linked into place
  (`FileStore.create`: the content is whole the moment the name exists). S3: a conditional PUT
  (`IfNoneMatch='*'`; the server answers 412 to the losers), then a read-back after `S3_SETTLE_S` that
  must find this claim's own nonce: some S3-compatible servers (versitygw's posix backend, seen here)
  let several racing conditional PUTs succeed, the last one winning the content, so only the writer
  whose body stayed has the claim. The claim is split into `put_claim` and `claim_held` so an async
  caller can wait the settle time without blocking a thread.
- `record(repo, sha, run_id)` adds the flow run id to the claim (permanent: later copies are answered
  with it); `release(...)` drops a claim that produced no queue entry, so the hub's retry can claim
  again; `read(...)` returns the record or None.
- The queue: `enqueue(repo, sha)` writes `webhook/queue/<org>/<name>/<sha>.json` (idempotent) once the
  claim is won and before the delivery is answered 202; `dequeue(...)` deletes it once the run id is
  recorded; `queued()` lists what is left (read from the keys alone), resumed at start-up.
Every failure to reach or write the store raises `StoreError` or `OSError`.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time

from pydantic import JsonValue

from day0.errors import StoreError
from day0.store import ArtifactStore, FileStore, S3Store

__all__ = ["S3_SETTLE_S", "DedupeStore"]

_CLAIMS = "webhook/claims"
_QUEUE = "webhook/queue"
S3_SETTLE_S = 0.3  # longer than racing PUTs that all passed the precondition take to land
_LOST = ("PreconditionFailed", "412", "ConditionalRequestConflict")


class DedupeStore:
    def __init__(self, store: ArtifactStore):
        if not isinstance(store, FileStore | S3Store):
            raise StoreError(f"{type(store).__name__} has no atomic create-if-absent")
        self.store = store

    @staticmethod
    def key(repo: str, sha: str) -> str:
        digest = hashlib.sha256(f"{repo}@{sha}".encode()).hexdigest()[:16]
        return f"{_CLAIMS}/{repo.replace('/', '--')}/{sha}-{digest}.json"

    @staticmethod
    def queue_key(repo: str, sha: str) -> str:
        return f"{_QUEUE}/{repo}/{sha}.json"  # repo is 'org/name', both validated: one folder level each

    # --- claims ---------------------------------------------------------------------------------

    def put_claim(self, repo: str, sha: str) -> bytes | None:
        """Create the claim if absent: its body when this call wrote it, None when it existed. On S3,
        `claim_held(body)` after `S3_SETTLE_S` says whether the write really won."""
        record = {"repo": repo, "sha": sha, "flow_run_id": None, "claimed_at": time.time()}
        body = json.dumps(record | {"nonce": secrets.token_hex(8)}).encode()
        key = self.key(repo, sha)
        if isinstance(self.store, FileStore):
            return body if self.store.create(key, body) else None
        return body if _put_if_absent(self.store, key, body) else None

    def claim_held(self, repo: str, sha: str, body: bytes) -> bool:
        if isinstance(self.store, FileStore):
            return True
        try:
            return bool(self.store.get_bytes(self.key(repo, sha)) == body)
        except StoreError as exc:
            if _missing(exc):
                return False
            raise

    def claim(self, repo: str, sha: str) -> bool:
        """`put_claim` and, on S3, the settle and read-back: True for the one caller that holds it."""
        body = self.put_claim(repo, sha)
        if body is None:
            return False
        if isinstance(self.store, S3Store):
            time.sleep(S3_SETTLE_S)
        return self.claim_held(repo, sha, body)

    def record(self, repo: str, sha: str, flow_run_id: str) -> None:
        self.store.put_json(self.key(repo, sha), {"repo": repo, "sha": sha, "flow_run_id": flow_run_id})

    def read(self, repo: str, sha: str) -> dict[str, JsonValue] | None:
        """The claim's record, or None when there is none. A store that cannot be read raises."""
        try:
            data = self.store.get_bytes(self.key(repo, sha))
        except StoreError as exc:
            if _missing(exc):
                return None
            raise
        try:
            record = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise StoreError(f"{self.store.url(self.key(repo, sha))} is not a claim record") from None
        return record if isinstance(record, dict) else None

    def release(self, repo: str, sha: str) -> None:
        self._delete(self.key(repo, sha))

    # --- the queue ------------------------------------------------------------------------------

    def enqueue(self, repo: str, sha: str) -> None:
        self.store.put_json(self.queue_key(repo, sha), {"repo": repo, "sha": sha, "queued_at": time.time()})

    def dequeue(self, repo: str, sha: str) -> None:
        self._delete(self.queue_key(repo, sha))

    def queued(self) -> list[tuple[str, str]]:
        """(repo, sha) of every queue entry, oldest key order; written-but-unfinished temp files skipped."""
        entries = []
        for key in self.store.list(_QUEUE + "/"):
            parts = key.split("/")
            if len(parts) == 5 and parts[4].endswith(".json"):
                entries.append((f"{parts[2]}/{parts[3]}", parts[4].removesuffix(".json")))
        return entries

    def _delete(self, key: str) -> None:
        if isinstance(self.store, FileStore):
            self.store.local_path(key).unlink(missing_ok=True)
            return
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.store.client.delete_object(Bucket=self.store.bucket, Key=self.store._key(key))
        except (BotoCoreError, ClientError) as exc:
            raise StoreError(f"cannot delete {self.store.url(key)}: {exc}") from None


def _missing(exc: StoreError) -> bool:
    """A read error that means 'no such object' (file store: does not exist; S3: NoSuchKey / 404)."""
    text = str(exc)
    return "does not exist" in text or "NoSuchKey" in text or "(404)" in text or "Not Found" in text


def _put_if_absent(store: S3Store, key: str, body: bytes) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        store.client.put_object(
            Bucket=store.bucket, Key=store._key(key), Body=body, ContentType="application/json", IfNoneMatch="*"
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in _LOST:
            return False
        raise StoreError(f"cannot claim {store.url(key)}: {exc}") from None
    except BotoCoreError as exc:
        raise StoreError(f"cannot claim {store.url(key)}: {exc}") from None
    return True
