"""`day0 webhook serve` refuses to start, with exit 2 and the setting named, without a secret or
with a watch config that is not one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _serve(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "DAY0_WEBHOOK_SECRET"} | env
    cmd = [sys.executable, "-m", "cli", "webhook", "serve", "--port", "0", *args]
    return subprocess.run(cmd, cwd=REPO, env=full, capture_output=True, text=True, timeout=120)


def test_no_secret_is_a_usage_error() -> None:
    proc = _serve()
    assert proc.returncode == 2 and "DAY0_WEBHOOK_SECRET" in proc.stderr


def test_a_bad_watch_config_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "watch.yaml").write_text("watch: {orgs: [a], colours: [red]}\ntemplate: nowhere.yaml\n")
    proc = _serve("--watch", str(tmp_path / "watch.yaml"), DAY0_WEBHOOK_SECRET="x")
    assert proc.returncode == 2 and "watch.colours" in proc.stderr, proc.stderr
