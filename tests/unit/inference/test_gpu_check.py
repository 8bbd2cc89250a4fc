"""`make gpu-check`'s wiring, dry-run on this CPU: the spec it writes validates for the GPU platform
with vLLM as its engine, the commands are day0's own, and a store without results gives figures that
say what is missing rather than numbers."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from benchmarks.gpu_check import main
from day0.spec.pipeline import spec_from_dict


def test_dry_run_writes_the_plan_and_names_missing_figures(tmp_path: Path) -> None:
    assert main(["--dry-run", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    spec = spec_from_dict(yaml.safe_load((tmp_path / "gpu-check.yaml").read_text()))
    assert spec.platform.device_type == "cuda" and spec.inference.engine == "vllm"
    assert report["dry_run"] and "device" not in report and "steps" not in report
    run, calibrate = report["commands"]["run"], report["commands"]["calibrate"]
    assert run[-4:] == ["run", str(tmp_path / "gpu-check.yaml"), "--fresh", "--json"]
    assert calibrate[-5:] == ["calibrate", "h100", "--workers", "1", "--json"]
    assert report["commands"]["engine"][-2:] == ["vllm", "cuda"]
    assert set(report["figures"]) == {"operators", "trial", "inference"}
    assert all("missing" in figure for figure in report["figures"].values())
