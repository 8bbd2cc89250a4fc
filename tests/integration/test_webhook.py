"""The release webhook end to end: `day0 webhook serve` (real uvicorn on 127.0.0.1, as a subprocess)
triggering the adaptation deployment served (`adapt.serve`, a subprocess) on the session's real
Prefect server, with its claims and queue in a real file store. The receiver answers 202 once a
release is queued and creates the run off the request path, so runs are waited for; they are read
back with the Prefect client and may still be pending or may have failed (the pinned hf:// model is
offline): what is checked is how many runs were created and with which parameters."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.paths import REPO
from tests.fixtures.webhook import runs_of, wait_runs, write_watch
from testsupport.webhook import Receiver, hub_payload

pytestmark = pytest.mark.integration
SECRET = "s3cr3t-day0-webhook-token"
ORG = "day0-test"


def _sha() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex[:8]


def _runs_for(api_url: str, sha: str) -> list[Any]:
    """Flow runs of adapt/release whose spec pins `sha`."""
    return runs_of("adapt/release", sha)


@pytest.fixture(scope="module")
def api_url(prefect_server: None) -> str:
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


@pytest.fixture(scope="module")
def served(api_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """`adapt.serve(name="release")` in a subprocess, until the deployment is registered."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "PREFECT_API_URL": api_url}
    code = "from flows.adapt import adapt; adapt.serve(name='release', print_starting_message=False)"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)

    async def registered() -> bool:
        async with get_client() as client:
            try:
                await client.read_deployment_by_name("adapt/release")
                return True
            except ObjectNotFound:
                return False

    try:
        deadline = time.monotonic() + 180
        while not asyncio.run(registered()):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "adapt/release was not registered within 180 s"
            time.sleep(1)
        yield
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def receiver(api_url: str, served: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Receiver]:
    root = tmp_path_factory.mktemp("webhook")
    write_watch(root, [ORG], patterns=["other-org/Watched-*"])
    rx = Receiver(SECRET, root / "watch.yaml", f"file://{root}/store", {"PREFECT_API_URL": api_url}, root / "rx.log")
    with rx:
        yield rx


def _post(rx: Receiver, payload: Any, **kw: Any) -> httpx.Response:
    return httpx.post(rx.url + "/webhook", json=payload, headers=kw.pop("headers", rx.headers), timeout=60, **kw)


def _claimed_run(rx: Receiver, repo: str, sha: str) -> str | None:
    from day0.store import open_store
    from day0.webhook.dedupe import DedupeStore

    return (DedupeStore(open_store(rx.store)).read(repo, sha) or {}).get("flow_run_id")


def test_new_commit_starts_one_run_pinned_to_the_sha(receiver: Receiver, api_url: str) -> None:
    sha = _sha()
    r = _post(receiver, hub_payload(f"{ORG}/Tiny-MoE", sha))
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["started"] and body["queued"] and not body["duplicate"]
    assert body["sha"] == sha and body["reason"] == "new commit on main"
    runs = wait_runs(receiver, "adapt/release", sha)
    assert len(runs) == 1
    spec = runs[0].parameters["spec"]
    assert spec["model"]["source"] == f"hf://{ORG}/Tiny-MoE@{sha}"
    assert spec["steps"] == ["analyze"] and spec["metadata"]["name"] == f"day0-test-tiny-moe-{sha[:12]}"
    assert runs[0].idempotency_key == f"{ORG}/Tiny-MoE@{sha}"
    assert _claimed_run(receiver, f"{ORG}/Tiny-MoE", sha) == str(runs[0].id)


def test_new_repo_of_a_watched_pattern_starts_a_run(receiver: Receiver, api_url: str) -> None:
    sha = _sha()
    r = _post(receiver, hub_payload("other-org/Watched-7B", sha, scope="repo", action="create"))
    assert r.status_code == 202, r.text
    assert len(wait_runs(receiver, "adapt/release", sha)) == 1


def test_twenty_concurrent_copies_start_one_run(receiver: Receiver, api_url: str) -> None:
    sha = _sha()
    payload = hub_payload(f"{ORG}/Concurrent", sha)

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            posts = [client.post(receiver.url + "/webhook", json=payload, headers=receiver.headers) for _ in range(20)]
            return await asyncio.gather(*posts)

    responses = asyncio.run(burst())
    assert {r.status_code for r in responses} <= {200, 202}, [r.text for r in responses]
    assert [r.json()["started"] for r in responses].count(True) == 1
    copies = [r.json() for r in responses if not r.json()["started"]]
    assert all(c["duplicate"] and (c.get("queued") or c.get("flow_run_id")) for c in copies), copies
    runs = wait_runs(receiver, "adapt/release", sha)
    assert len(runs) == 1
    assert _claimed_run(receiver, f"{ORG}/Concurrent", sha) == str(runs[0].id)


def test_a_copy_after_a_restart_starts_no_run(receiver: Receiver, api_url: str) -> None:
    sha = _sha()
    first = _post(receiver, hub_payload(f"{ORG}/Restart", sha))
    assert first.status_code == 202, first.text
    (run,) = wait_runs(receiver, "adapt/release", sha)
    receiver.restart()
    again = _post(receiver, hub_payload(f"{ORG}/Restart", sha))
    assert again.status_code == 200 and again.json()["reason"] == "duplicate"
    assert again.json()["flow_run_id"] == str(run.id)
    assert len(_runs_for(api_url, sha)) == 1


def test_wrong_secret_is_401_and_echoes_nothing(receiver: Receiver, api_url: str) -> None:
    sha = _sha()
    for headers in ({"X-Webhook-Secret": SECRET[:-1] + "X"}, {}, {"X-Webhook-Secret": SECRET + SECRET}):
        r = _post(receiver, hub_payload(f"{ORG}/Secret", sha), headers=headers)
        assert r.status_code == 401 and r.json() == {}
        assert SECRET[:8] not in r.text
    assert _runs_for(api_url, sha) == []


@pytest.mark.parametrize(
    ("case", "status", "expect"),
    [
        ("not json", 400, "malformed_json"),
        ("unknown scope", 422, "event.scope"),
        ("invalid repo id", 422, "repo.name"),
        ("invalid sha", 422, "updatedRefs.0.newSha"),
        ("no repo", 422, "repo"),
    ],
)
def test_bad_payloads_are_4xx_with_the_reason(
    receiver: Receiver, api_url: str, case: str, status: int, expect: str
) -> None:
    sha = _sha()
    payload = hub_payload(f"{ORG}/Bad", sha)
    content = None
    if case == "not json":
        content = b'{"event": {"action": "update",'
    elif case == "unknown scope":
        payload["event"]["scope"] = "repo.secrets"
    elif case == "invalid repo id":
        payload["repo"]["name"] = "../../etc/passwd"
    elif case == "invalid sha":
        payload["updatedRefs"][0]["newSha"] = "not-a-sha"
    else:
        del payload["repo"]
    headers = {**receiver.headers, "Content-Type": "application/json"}
    if content is not None:
        r = httpx.post(receiver.url + "/webhook", content=content, headers=headers, timeout=60)
    else:
        r = _post(receiver, payload)
    assert r.status_code == status, r.text
    assert expect in r.text
    assert _runs_for(api_url, sha) == []


def test_oversized_bodies_are_413_declared_or_streamed(receiver: Receiver) -> None:
    big = b'{"pad": "' + b"x" * (300 * 1024) + b'"}'
    r = httpx.post(receiver.url + "/webhook", content=big, headers=receiver.headers, timeout=60)
    assert r.status_code == 413 and r.json()["error"] == "too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is counted while reading
        for _ in range(40):
            yield b"x" * 10_000

    r = httpx.post(receiver.url + "/webhook", content=chunks(), headers=receiver.headers, timeout=60)
    assert r.status_code == 413 and r.json()["error"] == "too_large"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"repo_type": "dataset"}, "dataset repos start nothing"),
        ({"repo_type": "space"}, "space repos start nothing"),
        ({"scope": "repo", "action": "delete"}, "repo delete starts nothing"),
        ({"scope": "discussion", "action": "create"}, "discussion events start nothing"),
        ({"ref": "refs/pr/3"}, "no new commit on main (updated refs: refs/pr/3)"),
        ({"ref": "refs/tags/v1"}, "no new commit on main"),
        ({"scope": "repo.config"}, "repo.config update events start nothing"),
        ({"repo": "some-other-org/Tiny-MoE"}, "is not in the watch list"),
    ],
)
def test_events_that_start_nothing_are_200_with_the_reason(
    receiver: Receiver, api_url: str, change: dict[str, str], reason: str
) -> None:
    sha = _sha()
    repo = change.pop("repo", f"{ORG}/Tiny-MoE")
    r = _post(receiver, hub_payload(repo, sha, **change))
    assert r.status_code == 200, r.text
    assert r.json()["started"] is False and reason in r.json()["reason"]
    assert _runs_for(api_url, sha) == []


def _metrics(rx: Receiver) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(rx.url + "/metrics", timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_every_outcome_and_logs_never_show_the_secret(receiver: Receiver) -> None:
    before = _metrics(receiver)
    sha = _sha()
    _post(receiver, hub_payload(f"{ORG}/Metrics", sha))
    _post(receiver, hub_payload(f"{ORG}/Metrics", sha))
    _post(receiver, hub_payload(f"{ORG}/Metrics", sha), headers={"X-Webhook-Secret": "wrong"})
    _post(receiver, hub_payload(f"{ORG}/Metrics", sha, repo_type="dataset"))
    after = _metrics(receiver)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("day0_webhook_received_total") == 4
    assert delta("day0_webhook_accepted_total") == 1
    assert delta("day0_webhook_deduplicated_total") == 1
    assert delta("day0_webhook_rejected_total", reason="bad_secret") == 1
    assert delta("day0_webhook_ignored_total", reason="dataset_repo") == 1
    assert delta("day0_webhook_latency_seconds_count") == 4
    assert httpx.get(receiver.url + "/healthz", timeout=30).json() == {"status": "ok"}
    log = receiver.log.read_text() if receiver.log else ""
    assert f"{ORG}/Metrics@{sha}" in log
    assert SECRET not in log


def test_a_claim_left_by_a_dead_receiver_is_run_by_the_next_copy(receiver: Receiver, api_url: str) -> None:
    """A claim without a run id and without a queue entry (a receiver killed between the two writes, or
    an older receiver's claim): the next copy is answered 202 (never 200 with no run) and runs it once."""
    import json

    from day0.store import open_store
    from day0.webhook.dedupe import DedupeStore

    dedupe, sha = DedupeStore(open_store(receiver.store)), _sha()
    record = {"repo": f"{ORG}/Crashed", "sha": sha, "flow_run_id": None, "claimed_at": time.time()}
    dedupe.store.put_bytes(dedupe.key(f"{ORG}/Crashed", sha), json.dumps(record).encode())
    r = _post(receiver, hub_payload(f"{ORG}/Crashed", sha))
    assert r.status_code == 202 and r.json()["duplicate"] and r.json()["queued"], r.text
    (run,) = wait_runs(receiver, "adapt/release", sha)
    assert _claimed_run(receiver, f"{ORG}/Crashed", sha) == str(run.id)
    again = _post(receiver, hub_payload(f"{ORG}/Crashed", sha))
    assert again.status_code == 200 and again.json()["flow_run_id"] == str(run.id)
    assert (f"{ORG}/Crashed", sha) not in dedupe.queued()
