"""Committed snapshots of readings (`configs/platforms/libraries/<package>-<version>.json`), so a
machine without the wheels (offline, or one that never downloaded 550 MB of torch) resolves the same
library, saying it read a snapshot. One op per line, sorted: a new release's snapshot diffs by op."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from day0.errors import UsageError
from day0.paths import CONFIGS_DIR
from day0.platforms.libraries.model import Reading

__all__ = ["load_snapshot", "snapshot_dir", "snapshot_path", "write_snapshot"]


def snapshot_dir() -> Path:
    return CONFIGS_DIR / "platforms" / "libraries"


def snapshot_path(package: str, version: str, directory: Path | None = None) -> Path:
    return (directory or snapshot_dir()) / f"{package}-{version}.json"


def load_snapshot(package: str, version: str, directory: Path | None = None) -> Reading | None:
    path = snapshot_path(package, version, directory)
    if not path.is_file():
        return None
    try:
        reading = Reading.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise UsageError(
            f"{path}: not a library snapshot ({exc.errors()[0]['msg']}); rewrite it with "
            f"day0 fetch-library {package}=={version}"
        ) from None
    for f in reading.files:
        f.via = "snapshot"
    return reading


def write_snapshot(reading: Reading, directory: Path | None = None) -> Path:
    """Atomically: a reader never sees half a snapshot."""
    path = snapshot_path(reading.package, reading.version, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = reading.model_dump(mode="json", exclude={"files": {"__all__": {"via"}}})  # a snapshot says so when read
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(text)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp.name, 0o666 & ~umask)  # a committed file, not the temporary file's 0600
    os.replace(tmp.name, path)
    return path
