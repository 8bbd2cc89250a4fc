"""`day0 run SPEC --only STEPS` as a subprocess for the kuberay e2e tests: its output collected as it
comes (the tests react to progress lines), the run's pods watched, and nothing left behind on exit."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from day0.backends.kuberay.manifest import RUN_ID_LABEL, label_value
from tests.fixtures.cli import start_day0

REPO = Path(__file__).resolve().parents[2]


class Day0Run:
    def __init__(self, spec: Path, only: str, *, api_url: str, api: Any, run_id: str, home: Path, **env: str) -> None:
        full = {"PREFECT_API_URL": api_url, "PREFECT_HOME": str(home), **env}
        full.update(PYTHONUNBUFFERED="1", PREFECT_LOGGING_LEVEL="INFO")
        self.api, self.run_id, self.lines = api, run_id, []
        self.groups: set[str] = set()  # worker groups seen with a Running pod
        self.proc = start_day0(
            "run",
            spec,
            "--only",
            only,
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._threads = [threading.Thread(target=f, daemon=True) for f in (self._read, self._watch)]
        for t in self._threads:
            t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def _watch(self) -> None:
        while self.proc.poll() is None:
            try:
                for pod in self.pods():
                    if pod.status.phase == "Running":
                        self.groups.add(pod.metadata.labels.get("ray.io/group", "?"))
            except Exception:  # noqa: BLE001 - a missed poll only loses a sample of what ran
                pass
            time.sleep(1)

    def pods(self) -> list[Any]:
        from kubernetes import client

        selector = f"{RUN_ID_LABEL}={label_value(self.run_id)}"
        return list(client.CoreV1Api(self.api).list_namespaced_pod("day0", label_selector=selector).items)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, what: str, check: Callable[[], Any], timeout_s: float = 600) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if value := check():
                return value
            if self.proc.poll() is not None:
                raise AssertionError(f"day0 run exited ({self.proc.returncode}) before {what}:\n{self.output[-6000:]}")
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}:\n{self.output[-6000:]}")

    def finish(self, timeout_s: float = 800) -> int:
        try:
            return self.proc.wait(timeout_s)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            for t in self._threads:
                t.join(5)

    def __enter__(self) -> Day0Run:
        return self

    def __exit__(self, *exc: object) -> None:
        """Never leave the run or its cluster behind, whatever the test asserted."""
        from day0.backends.kuberay.lifecycle import delete_run_clusters

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        delete_run_clusters("day0", self.run_id, api_client=self.api)
