"""Step 2 as a Prefect task over step 1's result: stored, rendered, and reused on a rerun."""

from __future__ import annotations

from pathlib import Path

from day0.paths import CONFIGS_DIR
from day0.runs.context import RunContext
from day0.spec.pipeline import load_yaml, spec_from_dict
from day0.steps.analyze.run import analyze_model
from tasks.steps import TASKS


def test_operators_task_stores_result_and_resumes(tmp_path: Path, prefect_server: None) -> None:
    raw = load_yaml(CONFIGS_DIR / "pipelines" / "tiny-local.yaml")
    raw["storage"] = f"file://{tmp_path}"
    raw["training"]["precision"]["compute"] = "bf16"
    spec = spec_from_dict(raw)
    ctx = RunContext.create(spec)
    analyzed = analyze_model(spec.model, spec.platform, "bf16")
    result = TASKS["operators"].fn(ctx, analyzed=analyzed)
    assert len(result.ops.checks) == len(analyzed.inventory.ops)
    assert result.passed, result.to_markdown()
    assert result.layers is not None and result.layers.compute_dtype == "bf16"
    store = ctx.store
    assert store.exists(ctx.key("operators", "result.json"))
    assert "Step 2" in store.get_bytes(ctx.key("operators", "result.md")).decode()
    assert store.get_bytes(ctx.key("operators", "layers.png")).startswith(b"\x89PNG")  # bf16 errors plotted
    again = TASKS["operators"].fn(ctx, analyzed=analyzed)  # completed earlier: read back, not recomputed
    assert again.model_dump() == result.model_dump()
