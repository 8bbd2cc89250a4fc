"""The regression flow against a real Prefect server, as `python -m flows.regression` subprocesses:
the first run records a versioned baseline (a pass), `--update-baseline` writes the next version and
keeps the first, and a kernel update that makes aten::mm worse (the same `day0.platforms` entry
point now served by a faulty plugin) is flagged and named with its numbers, while a broken
watch-list entry does not stop the others. Every rerun lives in its own store folder."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.budgets import small_production_checks
from tests.fixtures.paths import REPO

pytestmark = pytest.mark.integration
PLUGIN_PATH = REPO  # the path entry tests.fixtures.faulty_kernels imports from: the checkout


def _site(root: Path, target: str) -> Path:
    """A dist-info dir offering the `day0.platforms` entry point `regress_vendor` -> `target`."""
    info = root / "day0_regress_vendor-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: day0-regress-vendor\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[day0.platforms]\nregress_vendor = {target}\n")
    return root


def _regression(tmp: Path, api_url: str, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(site), str(tmp), str(PLUGIN_PATH), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PREFECT_API_URL": api_url, "PYTHONPATH": path, "PREFECT_HOME": str(tmp / "prefect")}
    cmd = [sys.executable, "-m", "flows.regression", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def api_url(prefect_server: None) -> str:
    from prefect.settings import PREFECT_API_URL

    return str(PREFECT_API_URL.value())


def test_unchanged_stack_passes_and_a_worse_kernel_is_named(tmp_path: Path, api_url: str) -> None:
    (tmp_path / "stock_vendor.py").write_text("def register(table):\n    pass  # every op on the stock kernel\n")
    good = _site(tmp_path / "good", "stock_vendor:register")
    bad = _site(tmp_path / "bad", "tests.fixtures.faulty_kernels:matmul_low_precision")
    platform = yaml.safe_load((REPO / "configs/platforms/cpu.yaml").read_text())
    platform |= {"name": "regress-cpu", "vendor_plugin": "regress_vendor"}
    spec = {
        "metadata": {"name": "regress-tiny"},
        "model": "tiny-deepseek-v3",
        "platform": platform,
        "training": {"seq_len": 64, "global_batch": 4, "micro_batch": 2, "precision": {"compute": "fp32"}},
        "steps": ["analyze", "operators"],
        "storage": f"file://{tmp_path}/runs",
    }
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(small_production_checks(spec)))
    store = tmp_path / "store"
    entry = {"name": "tiny", "spec": "tiny.yaml", "steps": ["analyze", "operators"]}
    broken = {"name": "broken", "spec": "missing.yaml", "steps": ["analyze", "operators"]}
    (tmp_path / "watch.yaml").write_text(yaml.safe_dump({"storage": f"file://{store}", "models": [entry]}))
    (tmp_path / "watch2.yaml").write_text(yaml.safe_dump({"storage": f"file://{store}", "models": [broken, entry]}))

    first = _regression(tmp_path, api_url, good, str(tmp_path / "watch.yaml"))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "PASS tiny: baseline created: v1" in first.stdout, first.stdout[-2000:]
    v1 = (store / "regression/baselines/tiny/v0001.json").read_text()
    assert '"aten::mm@fp32"' in v1 and '"baseline created"' in v1

    accepted = _regression(tmp_path, api_url, good, str(tmp_path / "watch.yaml"), "--update-baseline")
    assert accepted.returncode == 0, accepted.stderr[-3000:]
    assert "baseline updated: v2" in accepted.stdout and "v1 kept" in accepted.stdout, accepted.stdout[-2000:]
    assert (store / "regression/baselines/tiny/v0001.json").read_text() == v1, "the previous version is kept"
    v2 = (store / "regression/baselines/tiny/v0002.json").read_text()

    worse = _regression(tmp_path, api_url, bad, str(tmp_path / "watch2.yaml"))
    assert worse.returncode == 1, worse.stdout[-2000:] + worse.stderr[-3000:]
    fail_line = next(line for line in worse.stderr.splitlines() if line.startswith("FAIL"))
    assert "broken: rerun failed" in fail_line, "the broken entry is reported..."
    assert "regressed: tiny: aten::mm@fp32" in fail_line, "...and the next model was still compared"
    mm = fail_line.split("regressed: tiny: aten::mm@fp32", 1)[1].split("|")[0]
    assert "pass -> wrong_numbers" in mm and "RMS error" in mm, mm
    assert any(ch.isdigit() for ch in mm.split("RMS error", 1)[1]), "by how much"
    assert sorted(p.name for p in (store / "regression/baselines/tiny").iterdir()) == ["v0001.json", "v0002.json"]
    assert (store / "regression/baselines/tiny/v0002.json").read_text() == v2, "baselines change only when asked"
    assert len(list((store / "regression/history/tiny").glob("*.json"))) == 3
    section = (store / "regression/report/tiny.md").read_text()
    assert "**regressed**: tiny: aten::mm@fp32 pass -> wrong_numbers" in section and section.count("\n| 20") == 3
    assert (store / "regression/report/tiny.png").read_bytes()[:4] == b"\x89PNG"
    # each rerun ran in a folder of its own under the spec's store, and no user run was made
    reruns = list((tmp_path / "runs/regression/runs/tiny").iterdir())
    assert len(reruns) == 3 and not (tmp_path / "runs/runs").exists(), reruns

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async def trend() -> list[dict]:
        async with get_client() as client:
            arts = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["regression-trend"]))
            )
            latest = max(arts, key=lambda a: a.created)
            import json

            return json.loads(latest.data) if isinstance(latest.data, str) else latest.data

    rows = asyncio.run(trend())
    counts = [r["wrong_kernels"] for r in rows if r["model"] == "tiny"]
    assert counts == [0, 0, 1], "step 2's categories: a clean run has no wrong kernel, the faulty one one"
