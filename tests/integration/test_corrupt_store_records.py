"""Corrupt records in a run's folder (issue 44), through real `day0 run` subprocesses on the real file
store. A garbage `analyze/code.json` failed every run, `--fresh` included (the marker was read before
fresh was honoured); a corrupt attempt record or lock file gave "internal error: JSONDecodeError"
before anything ran; no message named the file. Now: the step's marker or result is named with
`--fresh` as the way out (exit 2), `--fresh` reads no marker, and a corrupt attempt record or lock
holder is moved aside to the run's `corrupt/` folder with a note while the run goes on."""

from __future__ import annotations

from pathlib import Path

import pytest

from day0.runs.context import RunContext
from day0.spec.pipeline import load_spec
from tests.fixtures.cli import day0

pytestmark = pytest.mark.integration


def test_corrupt_records_are_named_moved_aside_or_recomputed(prefect_server: None, tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    # the messages name long paths: one line each; the session's Prefect server spares each of the seven runs
    # starting an ephemeral one (~7 s here)
    env = {"COLUMNS": "400", "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "metadata: {name: corrupt}\nmodel: tiny-deepseek-v3\nplatform: cpu\nsteps: [analyze]\n"
        f"storage: file://{tmp_path}/store\n"
    )
    folder = tmp_path / "store" / RunContext.create(load_spec(spec)).prefix
    assert day0("run", spec, env=env).returncode == 0

    (folder / "analyze/code.json").write_bytes(b"\x89garbage{")
    named = day0("run", spec, env=env)
    assert named.returncode == 2, named.stderr[-3000:]
    assert f"file://{folder}/analyze/code.json is corrupt (not JSON" in named.stderr, named.stderr[-3000:]
    assert "run again with --fresh to recompute analyze" in named.stderr
    assert "Traceback" not in named.stderr and "internal error" not in named.stderr

    fresh = day0("run", spec, "--fresh", env=env)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert b"digest" in (folder / "analyze/code.json").read_bytes(), "the step was recomputed and its marker rewritten"

    (folder / "analyze/result.json").write_text('{"verdict": "pass"}')
    wrong_shape = day0("run", spec, env=env)
    assert wrong_shape.returncode == 2, wrong_shape.stderr[-3000:]
    assert "analyze/result.json is corrupt (not a valid AnalyzeResult" in wrong_shape.stderr
    assert day0("run", spec, "--fresh", env=env).returncode == 0

    record = next(p for p in (folder / "attempts").rglob("*-analyze.json"))
    record.write_text("{not json")
    (folder / "lock").mkdir(exist_ok=True)
    (folder / "lock/holder.json").write_text("\x00\x00")
    recovered = day0("run", spec, env=env)
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    assert f"the run lock file://{folder}/lock/holder.json was corrupt (not JSON" in recovered.stderr
    assert f"file://{record} was corrupt (not JSON" in recovered.stderr and "moved aside to" in recovered.stderr
    aside = {p.name for p in (folder / "corrupt").rglob("*") if p.is_file()}
    assert record.name in aside and any(name.startswith("lock-holder-") for name in aside), aside
    assert not record.exists() and "Traceback" not in recovered.stderr
