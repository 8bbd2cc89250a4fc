"""Step 2 timing: the tiny DeepSeek-V3-family model's full operator inventory checked on the CPU
(values and gradients, against the CPU fp32 reference), adaptation of what fails, and the whole
model (one layer of each kind) compared layer by layer; the emulated ascend-910b library (missing
ops adapted); and DeepSeek-V3's full-size inventory under the per-call element cap.

    .venv/bin/python -m benchmarks.bench_operators

`run()` returns the numbers for benchmarks/run.py to collect.
"""

from __future__ import annotations

import json
import time
from typing import Any

__all__ = ["run"]

MODEL = "tiny-deepseek-v3"


def run() -> dict[str, Any]:
    from day0.paths import CONFIGS_DIR
    from day0.spec.cluster import PlatformSpec
    from day0.spec.pipeline import ModelSpec, load_yaml
    from day0.steps.analyze.run import analyze_model
    from day0.steps.operators.checks import run_operators
    from day0.steps.operators.config import ValidationSpec
    from day0.steps.operators.layers import WholeModel

    cpu = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "cpu.yaml"))
    analyzed = analyze_model(ModelSpec(source=MODEL), cpu, "fp32")
    inventory, capture_s = analyzed.inventory, analyzed.seconds
    out: dict[str, Any] = {"model": MODEL, "inventory_ops": len(inventory.ops), "analyze_s": round(capture_s, 2)}
    for platform_name, dtype, layers in (("cpu", "bf16", True), ("cpu", "fp32", False), ("ascend-910b", "bf16", False)):
        spec = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / f"{platform_name}.yaml"))
        start = time.perf_counter()
        result = run_operators(
            inventory, spec, ValidationSpec(), dtype, whole_model=WholeModel.from_analysis(analyzed) if layers else None
        )
        total = time.perf_counter() - start
        ops = result.ops
        out[f"{platform_name}-{dtype}"] = {
            "checks": len(ops.checks),
            "check_seconds": round(ops.seconds, 2),
            "ops_checked_per_s": round(ops.ops_per_second, 2),
            "adapted": {a.op: a.strategy for a in ops.adaptations},
            "still_failing": [c.op for c in ops.failing],
            "layer_check_s": round(result.layers.seconds, 2) if result.layers else None,
            "layers_passed": result.layers.passed if result.layers else None,
            "step_seconds": round(total, 2),
        }
    out["deepseek-v3-bf16-capped"] = _big("deepseek-v3")
    return out


def _big(name: str) -> dict[str, Any]:
    """The 671B model's inventory (captured on meta) checked with the per-call element cap: the
    step stays bounded; the whole-model check is skipped by its parameter cap on this host."""
    from day0.paths import CONFIGS_DIR
    from day0.spec.cluster import PlatformSpec
    from day0.spec.pipeline import ModelSpec, load_yaml
    from day0.steps.analyze.run import analyze_model
    from day0.steps.operators.checks import run_operators
    from day0.steps.operators.layers import WholeModel

    spec = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "cpu.yaml"))
    analyzed = analyze_model(ModelSpec(source=name), spec, "bf16")
    start = time.perf_counter()
    result = run_operators(analyzed.inventory, spec, None, "bf16", whole_model=WholeModel.from_analysis(analyzed))
    return {
        "checks": len(result.ops.checks),
        "ops_checked_per_s": round(result.ops.ops_per_second, 2),
        "shrunk": sum("shrunk" in c.reason for c in result.ops.checks),
        "still_failing": [c.op for c in result.ops.failing],
        "notes": result.notes,
        "step_seconds": round(time.perf_counter() - start, 2),
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
