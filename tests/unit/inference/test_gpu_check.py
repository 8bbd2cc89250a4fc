"""`make gpu-check`'s wiring, dry-run on this CPU: the spec it writes validates for the GPU platform
with vLLM as its engine, the commands are day0's own, a store without results gives figures that say
what is missing rather than numbers, and a real run's results (the recorded `make run`) give the
figures the JSON carries."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from benchmarks.gpu_check import figures, main
from day0.spec.pipeline import spec_from_dict
from tests.fixtures.report import recorded_run


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


def test_figures_are_read_from_a_real_runs_results(tmp_path: Path) -> None:
    ctx, steps, _ = recorded_run(tmp_path)  # the default spec's recorded run, stored as the pipeline stores it
    assert {"operators", "trial", "inference"} <= set(steps)
    found = figures(tmp_path / "store", bf16_tflops=1.0)
    ops, trial, served = found["operators"], found["trial"], found["inference"]
    checks = ctx.store.get_json(ctx.key("operators", "result.json"))["ops"]["checks"]
    assert ops["ops_checked"] == len(checks) > 0 and ops["worst_rel_rmse"]["rel_rmse"] >= 0
    recorded = ctx.store.get_json(ctx.key("trial", "result.json"))
    assert trial["tokens_per_s"] == recorded["candidate"]["tokens_per_s"] > 0
    assert trial["mfu"] is not None and 0 < trial["mfu"] < 1  # a CPU's tokens/s over a 1 TFLOP/s peak
    assert trial["predicted_step_s"] == recorded["cost_check"]["predicted_step_s"]
    sweep = ctx.store.get_json(ctx.key("inference", "result.json"))["sweep"]
    assert [p["concurrency"] for p in served["sweep"]] == [p["concurrency"] for p in sweep]
    assert all(p["output_tok_s"] > 0 and p["ttft_p99_ms"] for p in served["sweep"])
