"""The dedupe claim is create-if-absent under contention, on both stores: of 20 concurrent claims of
one repo+sha exactly one wins (file: a hard link into place; S3: conditional PUT on versitygw), the
record keeps the run id, a released claim can be taken again, a new store object (a restarted
receiver) sees the old claims, and the queue of accepted releases lists what was queued and not
yet dequeued."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from day0.store import ArtifactStore, open_store
from day0.webhook.dedupe import DedupeStore


def _contend(store: ArtifactStore) -> None:
    dedupe = DedupeStore(store)
    sha = "ab" * 20
    with ThreadPoolExecutor(20) as pool:
        wins = list(pool.map(lambda _: dedupe.claim("org/model", sha), range(20)))
    assert wins.count(True) == 1
    dedupe.record("org/model", sha, "run-1")
    restarted = DedupeStore(open_store(store.uri))
    assert restarted.claim("org/model", sha) is False
    assert restarted.read("org/model", sha) == {"repo": "org/model", "sha": sha, "flow_run_id": "run-1"}
    assert restarted.claim("org/model", "cd" * 20) is True  # another sha is another claim
    pending = restarted.read("org/model", "cd" * 20)
    assert pending is not None and pending["flow_run_id"] is None
    restarted.release("org/model", sha)
    assert restarted.read("org/model", sha) is None
    assert restarted.claim("org/model", sha) is True
    assert restarted.queued() == []
    for repo, s in (("org/model", sha), ("org/model", "cd" * 20), ("other/m.v2", sha)):
        restarted.enqueue(repo, s)
    restarted.enqueue("org/model", sha)  # idempotent
    assert sorted(DedupeStore(open_store(store.uri)).queued()) == [
        ("org/model", sha),
        ("org/model", "cd" * 20),
        ("other/m.v2", sha),
    ]
    restarted.dequeue("org/model", sha)
    restarted.dequeue("org/model", sha)  # already gone: no error
    assert sorted(restarted.queued()) == [("org/model", "cd" * 20), ("other/m.v2", sha)]


def test_file_store_claims_once(tmp_path: Path) -> None:
    _contend(open_store(f"file://{tmp_path}"))


@pytest.mark.integration
def test_s3_store_claims_once_with_a_conditional_put(s3_server) -> None:  # type: ignore[no-untyped-def]
    _contend(open_store(f"s3://{s3_server.bucket}/webhook-test"))
