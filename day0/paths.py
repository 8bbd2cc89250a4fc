"""Where the repository's declarative inputs live (overridable with DAY0_CONFIGS_DIR)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIGS_DIR = Path(os.environ.get("DAY0_CONFIGS_DIR", REPO_ROOT / "configs"))
