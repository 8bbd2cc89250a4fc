"""The adapt flow against a real Prefect server: results, report, artifacts, resume without recompute."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from day0.errors import UsageError
from day0.spec.pipeline import spec_from_dict
from flows.adapt import adapt, plan_steps

pytestmark = pytest.mark.integration


def tiny_spec(storage: str, name: str = "tiny-flow") -> dict:
    return {
        "metadata": {"name": name},
        "model": "tiny-deepseek-v3",
        "platform": "cpu",
        "training": {"precision": {"compute": "fp32"}},
        "steps": ["analyze"],
        "storage": storage,
    }


def test_run_writes_results_report_and_resumes(prefect_server, tmp_path: Path) -> None:
    spec = tiny_spec(f"file://{tmp_path}")
    first = adapt(spec=spec)
    assert first["executed"] == ["analyze"]
    run_dir = tmp_path / first["prefix"]
    result = yaml.safe_load((run_dir / "analyze/result.json").read_text())
    assert result["structure"]["params_total"] > 0 and result["coverage"]["platform"] == "cpu"
    assert (run_dir / "analyze/params.png").read_bytes()[:4] == b"\x89PNG"
    report_md = (run_dir / "report.md").read_text()
    assert (
        "analyze/params.png" in report_md
        and "| analyze | PASS | executed |" in report_md
        and "## Day-0 scorecard" in report_md
    )
    html = (run_dir / "report.html").read_text()
    assert "data:image/png;base64," in html and "<table>" in html

    second = adapt(spec=spec)
    assert second["run_id"] == first["run_id"]
    assert second["executed"] == [], "a rerun of the same spec must not recompute completed steps"
    manifest = yaml.safe_load((run_dir / "manifest.json").read_text())
    assert [[r["status"] for r in a] for a in manifest["attempts"]] == [["executed"], ["cached"]]


def test_markdown_artifact_is_published(prefect_server, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    adapt(spec=tiny_spec(f"file://{tmp_path}", name="artifact-check"))

    async def read() -> list:
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["artifact-check-analyze"]))
            )

    import asyncio

    artifacts = asyncio.run(read())
    assert artifacts and "Step 1: analyze" in artifacts[0].data


def test_s3_storage(prefect_server, s3_server) -> None:
    out = adapt(spec=tiny_spec(f"s3://{s3_server.bucket}/runs", name="tiny-s3"))
    keys = {o["Key"] for o in s3_server.client().list_objects_v2(Bucket=s3_server.bucket)["Contents"]}
    prefix = f"runs/{out['prefix']}"
    assert {f"{prefix}/analyze/result.json", f"{prefix}/report.html", f"{prefix}/manifest.json"} <= keys


def test_plan_steps_adds_prerequisites() -> None:
    # step 6 reads step 1 only (it serves step 5's model when step 5 ran, else the scaled-down one)
    spec = spec_from_dict(tiny_spec("file:///tmp/x") | {"steps": ["inference"]})
    assert plan_steps(spec) == ["analyze", "inference"]
    spec = spec_from_dict(tiny_spec("file:///tmp/x") | {"steps": ["trial"]})
    assert plan_steps(spec) == ["analyze", "parallel", "optimize", "trial"]
    with pytest.raises(UsageError, match="unknown step"):
        plan_steps(spec, only=["nope"])


def test_planner_calibrate_measures_the_platform_before_step_3(prefect_server, tmp_path: Path) -> None:
    from day0.planner.profile import profile_key

    spec = tiny_spec(f"file://{tmp_path}", name="tiny-calibrate") | {
        "steps": ["parallel"],
        "planner": {"calibrate": True},
    }
    try:
        out = adapt(spec=spec)
    finally:
        import ray

        ray.shutdown()  # the calibration started Ray in this process: later tests start their own
    # a sub-step of step 3 with its own record and folder (issue 41), not a side call inside step 3
    assert out["executed"] == ["analyze", "calibrate", "parallel"]
    assert (tmp_path / out["prefix"] / "calibrate/result.md").read_text().startswith("# Calibration of `cpu`")
    profile = tmp_path / profile_key("cpu")
    assert profile.exists(), "the calibrated profile is in the run's store"
    measured = profile.read_bytes()
    again = adapt(spec=spec)  # resumed: the calibration is reused, not measured again
    assert again["executed"] == [] and again["reused"] == ["analyze", "calibrate", "parallel"]
    assert profile.read_bytes() == measured
    plan = yaml.safe_load((tmp_path / out["prefix"] / "parallel/result.json").read_text())
    notes = plan["notes"] + plan["cluster"]["notes"]
    assert any("calibrated profile" in note for note in notes), notes
