"""The background builds of tests/fixtures/builds.py: started once per session, waited on, and a
failed build named with its log."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.fixtures import builds


@pytest.fixture(autouse=True)
def _own_session(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The markers in this test's own folder, apart from the running session's builds.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def _build(name: str, script: str) -> builds.Build:
    return builds.Build(name, ("bash", "-c", script), lambda item: True)


def test_a_build_runs_once_per_session_and_its_waiters_return_when_it_is_done(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    counter = tmp_path_factory.mktemp("counter") / "runs"
    build = _build("counted", f"echo run >> {counter}")
    builds.wait_for(build, timeout_s=30)
    builds.wait_for(build, timeout_s=30)  # claimed already: waits on the same marker, starts nothing
    assert counter.read_text().splitlines() == ["run"]


def test_a_failed_build_is_named_with_its_exit_status_and_log() -> None:
    with pytest.raises(builds.BuildFailed, match=r"(?s)broken \(bash -c .*\) failed \(exit 3\):.*no go here"):
        builds.wait_for(_build("broken", "echo no go here; exit 3"), timeout_s=30)


def test_a_build_that_never_finishes_is_named_at_the_deadline() -> None:
    with pytest.raises(builds.BuildFailed, match=r"slow \(bash -c sleep 3\) did not finish in 1 s"):
        builds.wait_for(_build("slow", "sleep 3"), timeout_s=1)
