"""`day0 plan` on a known structure: no torch or transformers in the process (nor Prefect, Ray, boto3 on a
file:// store, the hub client, rich with --json, pydantic-settings, importlib.metadata), the chosen plan
the same in --json and --out, and the spec's `planner:` section and a calibrated profile reaching the
cost model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli.plan import remember_structure
from day0.errors import UsageError
from day0.model.source import resolve_model
from day0.model.structure import ModelStructure
from day0.planner.inputs import PlannerOptions
from day0.planner.profile import CalibratedProfile, CollectivePoint, GemmPoint, profile_key
from day0.spec.pipeline import load_yaml, spec_from_dict
from day0.steps.parallel.plan import planner_inputs
from day0.store import open_store
from tests.fixtures import paths
from tests.fixtures.paths import REPO as ROOT

DATA = paths.DATA / "planner"


def _spec_file(tmp_path: Path, **planner: object) -> Path:
    raw = load_yaml(DATA / "deepseek-v3-2048-h800.yaml")
    raw["storage"] = f"file://{tmp_path / 'store'}"
    if planner:
        raw["planner"] = planner
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    spec = spec_from_dict(raw)
    structure = ModelStructure.model_validate_json((DATA / "deepseek-v3.structure.json").read_text())
    remember_structure(open_store(spec.storage), resolve_model(spec.model), structure)
    return path


# What a `day0 plan --json` on a cached structure and a file:// store has no use for.
_UNNEEDED = (
    "torch",
    "transformers",
    "prefect",
    "ray",
    "boto3",
    "botocore",
    "huggingface_hub",
    "rich",
    "pydantic_settings",
    "importlib.metadata",  # pydantic's plugin lookup, skipped where no plugin is installed (cli._plugins)
)
_PROBE = f"""
import json, sys
from cli.main import main
rc = main(["plan", sys.argv[1], "--json", "--out", sys.argv[2]])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {_UNNEEDED!r} or m in {_UNNEEDED!r})
print(json.dumps({{"rc": rc, "heavy": heavy}}), file=sys.stderr)
"""


def test_plan_on_a_cached_structure_imports_only_what_it_needs_and_agrees_with_out(tmp_path: Path) -> None:
    spec, out = _spec_file(tmp_path), tmp_path / "plan.yaml"
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(spec), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    probe = json.loads(proc.stderr.strip().splitlines()[-1])
    assert probe == {"rc": 0, "heavy": []}, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["chosen"] == yaml.safe_load(out.read_text())  # the same plan and estimate both ways
    assert doc["chosen"]["parallel"]["pipeline_parallel"] >= 1 and "step_s" in doc["chosen"]["estimate"]


def _unpinned() -> dict:
    """deepseek-v3-2048-h800 without its written training.micro_batch (which pins the micro-batch)."""
    raw = load_yaml(DATA / "deepseek-v3-2048-h800.yaml")
    raw["training"].pop("micro_batch")
    return raw


def test_planner_section_reaches_the_options(tmp_path: Path) -> None:
    raw = _unpinned()
    _, default = planner_inputs(spec_from_dict(raw))
    assert default == PlannerOptions()  # the spec's documented defaults are the planner's
    written = load_yaml(DATA / "deepseek-v3-2048-h800.yaml")  # training.micro_batch: 1 written: pinned
    _, pinned = planner_inputs(spec_from_dict(written))
    assert pinned.micro_batches == [1] and pinned.pinned == {"micro_batch": "training.micro_batch"}
    raw["planner"] = {
        "gemm_efficiency": {"bf16": 0.7},
        "max_context_parallel": 2,
        "sequence_parallel": False,
        "fp8_activation_cache": True,
        "overlap": {"ep": True},
        "selective_recompute": ["core_attn"],
    }
    _, o = planner_inputs(spec_from_dict(raw))
    assert o.gemm_efficiency["bf16"] == 0.7 and o.max_context_parallel == 2 and not o.sequence_parallel
    assert o.fp8_activation_cache and o.comm.ep_overlap and o.selective_modules == ["core_attn"]
    raw["planner"] = {"gemm_efficiency": {"bf16": 1.5}}
    with pytest.raises(Exception, match="gemm_efficiency"):
        spec_from_dict(raw)


def _profile() -> CalibratedProfile:
    hw = spec_from_dict(load_yaml(DATA / "deepseek-v3-2048-h800.yaml")).platform.hardware
    return CalibratedProfile(
        platform="h800",
        backend="nccl",
        workers=8,
        created="2026-01-01T00:00:00Z",
        datasheet=hw,
        gemm=[GemmPoint(dtype="bf16", m=8192, n=8192, k=8192, tflops=700.0)],
        hbm_bandwidth_gbps=2500.0,
        collectives=[CollectivePoint(op="all_reduce", bytes=1 << 28, seconds=0.01, bus_gbps=120.0)],
        collective_latency_us=25.0,
    )


def test_a_calibrated_profile_replaces_the_datasheet_unless_told_not_to(tmp_path: Path) -> None:
    raw = _unpinned()
    cluster, o = planner_inputs(spec_from_dict(raw), _profile())
    assert o.gemm_efficiency["bf16"] == pytest.approx(700 / 989) and o.hbm_bandwidth_gbps == 2500
    assert cluster.hardware.intra_node_bandwidth_gbps == 120 and o.collective_efficiency == 1.0
    assert o.profile.startswith("calibrated")
    raw["planner"] = {"profile": "datasheet"}
    _, o = planner_inputs(spec_from_dict(raw), _profile())
    assert o == PlannerOptions()
    raw["planner"] = {"profile": "calibrated"}
    with pytest.raises(UsageError, match="day0 calibrate h800"):
        planner_inputs(spec_from_dict(raw), None)


def test_plan_reads_the_profile_from_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main

    spec = _spec_file(tmp_path)
    assert main(["plan", str(spec), "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    open_store(f"file://{tmp_path / 'store'}").put_json(profile_key("h800"), _profile().model_dump(mode="json"))
    assert main(["plan", str(spec), "--json"]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["options"]["profile"].startswith("calibrated") and before["options"]["profile"] == "datasheet"
    assert after["chosen"]["estimate"]["step_s"] != before["chosen"]["estimate"]["step_s"]
