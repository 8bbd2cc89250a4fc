"""`Host`: what a pod worker needs from its runner (`PodRunner` implements it)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from testsupport.pod_runner.expand import Lookup
from testsupport.pod_runner.volumes import Source

__all__ = ["Host"]


class Host(Protocol):
    """What a pod worker needs from its runner."""

    runner_id: str
    max_grace_s: float
    backoff_s: float
    max_backoff_s: float
    source: Source
    lookup: Lookup
    code_dirs: list[Path]  # the virtualenv and the repository the pods run from

    def pod_dir(self, pod: Mapping[str, Any]) -> Path: ...

    def node_ip(self, node: str) -> str: ...

    def allocatable(self, node: str) -> Mapping[str, str]: ...

    def base_env(self, pod: Mapping[str, Any]) -> dict[str, str]: ...

    def write_hosts(self, pod: Mapping[str, Any], path: Path) -> None: ...

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], log: IO[bytes]) -> subprocess.Popen[bytes]: ...

    def post_status(self, pod: Mapping[str, Any], status: dict[str, Any]) -> None: ...
