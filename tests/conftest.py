"""Shared fixtures: a real Prefect server (test harness), a real S3-compatible server (versitygw),
and an offline, telemetry-free environment."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# the fixtures package holds helpers with asserts and a plugin (timings): rewritten before its first import
pytest.register_assert_rewrite("tests.fixtures")

from day0.core.ports import free_port  # noqa: E402
from tests.fixtures import builds, timings  # noqa: E402
from tests.fixtures.privateuse1 import openreg  # noqa: F401, E402 - the fixture, for every test module
from tests.fixtures.release import tiny_fp8_release, tiny_release, tiny_releases  # noqa: F401, E402 - built once per session

_TMP = Path(tempfile.mkdtemp(prefix="day0-tests-"))
os.environ.setdefault("PREFECT_HOME", str(_TMP / "prefect"))
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Ray Train's controller polls its workers every 2 s by default (sized for large clusters): each phase of a
# fit (workers up, training done) waited up to a poll, ~3 s of each of the suite's many tiny fits.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
# Spec files that flow parameters name (day0.spec.location): the repository's configs and the tests' temp files.
os.environ.setdefault(
    "DAY0_RUN_SPEC_ROOTS",
    os.pathsep.join([str(Path(__file__).resolve().parent.parent / "configs"), tempfile.gettempdir()]),
)

REPO = Path(__file__).resolve().parent.parent
# A suite started in the background of a non-interactive shell (`make test &`, `nohup ... &`) inherits SIGINT
# ignored, and so would every process it starts: `day0 run` could then not be interrupted as from a terminal,
# and the tests of Ctrl-C would fail for the way the suite was launched. (Python resets a handler, not an
# ignore, in the processes it starts, so theirs is the default again.)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
pytest_plugins = ["tests.fixtures.timings"]  # per-test wall and CPU time, build/test-times.tsv
# A test that uses a real service is an integration test whatever its module says, so
# `make test-fast` (`-m "not integration and not e2e"`) never starts one.
_SERVICE_FIXTURES = frozenset({"prefect_server", "local_ray", "s3_server"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("e2e"):
            item.add_marker(pytest.mark.integration)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The builds the selected tests need start now, in the background; the tests wait on them."""
    if not session.config.option.collectonly:
        builds.start_needed(session.items)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: `pytest -p no:xdist` still runs
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make test` runs on pytest-xdist workers (`-n`): a module's tests stay on one worker (its
    module-scoped Ray cluster starts once), and the Kubernetes e2e tests all run on one worker, one
    after another (they share the control plane, and a process-backed RayCluster binds the GCS port
    of the whole machine). While the control plane is still to be built (tests/fixtures/builds.py
    builds it in the background), the e2e tests wait at the back of the queue, so both workers run
    other tests meanwhile, and they are the next to go once it is built (checked at each assignment);
    the other scopes go longest first, by the last run's times (tests/fixtures/timings.py), so the
    two workers finish together. A scheduler of our own, as xdist's `loadgroup` marks do not reach
    pytest 9's node ids."""
    from xdist.scheduler import LoadScopeScheduling

    def built() -> bool:
        return subprocess.run([str(REPO / "k8s/build.sh"), "--check"], capture_output=True).returncode == 0

    e2e_waits = not built()
    seconds = timings.seconds_by_scope()

    class _ByModuleE2ETogether(LoadScopeScheduling):
        _ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return timings.scope_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:  # the longest first (the last run's times), so both workers end together
                self._ordered = True
                for scope in sorted(self.workqueue, key=lambda scope: -seconds.get(scope, 0.0)):
                    self.workqueue.move_to_end(scope)
            nonlocal e2e_waits
            if e2e_waits and "tests/e2e" in self.workqueue:
                e2e_waits = not built()
                self.workqueue.move_to_end("tests/e2e", last=e2e_waits)  # built: the longest scope, first
            super()._assign_work_unit(node)

    return _ByModuleE2ETogether(config, log)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray cluster (2 CPUs) for the tests of one module, shut down after them."""
    import ray

    from day0.backends.local.ray import connect

    ray.shutdown()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    connect(num_cpus=2)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[None]:
    """A real Prefect API server for the whole session (Prefect's own test harness)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    access_key: str
    secret_key: str
    bucket: str
    root: Path

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name="us-east-1",
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """versitygw serving a temp dir over the S3 API on 127.0.0.1, with one bucket; DAY0_STORE_* set."""
    builds.wait_for(builds.VERSITYGW)  # started when collection finished; the script below then finds it
    binary = subprocess.run(
        [str(REPO / "tests/tools/build-versitygw.sh")], check=True, text=True, stdout=subprocess.PIPE
    ).stdout.strip()
    root = tmp_path_factory.mktemp("s3")
    port = free_port()
    access, secret = "day0test", "day0test-secret"
    proc = subprocess.Popen(
        [binary, "--access", access, "--secret", secret, "--port", f"127.0.0.1:{port}", "posix", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    server = S3Server(f"http://127.0.0.1:{port}", access, secret, "day0-artifacts", root)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                server.client().create_bucket(Bucket=server.bucket)
                break
            except Exception:  # noqa: BLE001 - not up yet: retried until the deadline
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"versitygw did not start on port {port}") from None
                time.sleep(0.3)
        env = {
            "DAY0_STORE_ENDPOINT_URL": server.endpoint_url,
            "DAY0_STORE_ACCESS_KEY_ID": access,
            "DAY0_STORE_SECRET_ACCESS_KEY": secret,
        }
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        yield server
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    finally:
        proc.terminate()
        proc.wait(10)
