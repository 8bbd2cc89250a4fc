"""Where the repository's declarative inputs live (overridable with DAY0_CONFIGS_DIR), and where
day0 caches what it builds or downloads (DAY0_CACHE, default ~/.cache/day0).

A deployment can put its own folder before one of configs/' folders: DAY0_CLUSTERS_DIR (the Helm
chart mounts its cluster-spec ConfigMap there, so `helm upgrade` changes what the flows read).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIGS_DIR = Path(os.environ.get("DAY0_CONFIGS_DIR", REPO_ROOT / "configs"))
# configs/<folder> -> the environment variable naming a directory searched before it.
_OVERRIDE_ENV = {"clusters": "DAY0_CLUSTERS_DIR"}


def config_dirs(folder: str) -> list[Path]:
    """Directories a `folder` name (`clusters`, `platforms` ...) resolves in, first match wins.
    Read at call time, so a mounted directory set in the environment is honoured by every lookup."""
    override = os.environ.get(_OVERRIDE_ENV.get(folder, ""), "")
    return ([Path(override)] if override else []) + [CONFIGS_DIR / folder]


def cache_dir() -> Path:
    """The cache root: builds and downloads keyed by version live under it. Read at call time."""
    return Path(os.environ.get("DAY0_CACHE") or Path.home() / ".cache" / "day0")
