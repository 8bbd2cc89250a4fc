"""Job submission against a real local Ray head (`testsupport.ray.local_head`: `ray start --head
--block` in its own process group), the same path the KubeRay backend uses against a head pod's dashboard."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from day0.backends.jobs import JobError, job_client, run_job, submission_id
from day0.core.ports import free_port
from testsupport.ray import local_head

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    with local_head() as address:
        yield address


def test_submission_id_is_readable_and_unique() -> None:
    a, b = submission_id("run 1/x", "trial"), submission_id("run 1/x", "trial")
    assert a.startswith("day0-run-1-x-trial-") and a != b


def test_job_succeeds_with_logs(ray_head: str) -> None:
    out = run_job(
        ray_head,
        "python -c \"print('hello from day0')\"",
        timeout_s=120,
        sub_id=submission_id("t", "ok"),
        metadata={"step": "test"},
    )
    assert out.ok and out.status == "SUCCEEDED" and not out.timed_out
    assert "hello from day0" in out.logs_tail and out.address == ray_head


def test_job_failure_is_reported(ray_head: str) -> None:
    out = run_job(ray_head, "python -c \"import sys; print('boom'); sys.exit(3)\"", timeout_s=120)
    assert out.status == "FAILED" and not out.ok
    assert "boom" in out.logs_tail and "3" in out.message


def test_timeout_stops_the_job(ray_head: str) -> None:
    start = time.monotonic()
    out = run_job(ray_head, 'python -c "import time; time.sleep(600)"', timeout_s=5, poll_s=0.5)
    assert out.timed_out and out.status == "STOPPED" and time.monotonic() - start < 60


def test_unreachable_head_is_a_clear_error() -> None:
    with pytest.raises(JobError, match="not reachable"):
        job_client(f"http://127.0.0.1:{free_port()}", timeout_s=2)
