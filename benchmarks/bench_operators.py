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
    from day0.analysis.inventory import capture_operators
    from day0.core.model_source import resolve_model_source
    from day0.analysis.structure import analyze_structure
    from day0.core.modeling import build_meta_model, load_hf_config
    from day0.numerics.step import run_operators
    from day0.paths import CONFIGS_DIR
    from day0.spec import PlatformSpec, ValidationSpec, load_yaml

    start = time.perf_counter()
    model = build_meta_model(load_hf_config(resolve_model_source(MODEL)), MODEL, "fp32")
    inventory = capture_operators(model, analyze_structure(model, MODEL).attention_kind, "fp32")
    capture_s = time.perf_counter() - start
    out: dict[str, Any] = {"model": MODEL, "inventory_ops": len(inventory.ops), "inventory_capture_s": round(capture_s, 2)}
    for platform_name, dtype, layers in (("cpu", "bf16", True), ("cpu", "fp32", False), ("ascend-910b", "bf16", False)):
        spec = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / f"{platform_name}.yaml"))
        start = time.perf_counter()
        result = run_operators(inventory, spec, ValidationSpec(), dtype, model_source=MODEL if layers else None)
        total = time.perf_counter() - start
        ops = result.ops
        out[f"{platform_name}-{dtype}"] = {
            "checks": len(ops.checks), "check_seconds": round(ops.seconds, 2),
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
    from day0.analysis.inventory import capture_operators
    from day0.core.model_source import resolve_model_source
    from day0.analysis.structure import analyze_structure
    from day0.core.modeling import build_meta_model, load_hf_config
    from day0.numerics.step import run_operators
    from day0.paths import CONFIGS_DIR
    from day0.spec import PlatformSpec, load_yaml

    model = build_meta_model(load_hf_config(resolve_model_source(name)), name, "bf16")
    inventory = capture_operators(model, analyze_structure(model, name).attention_kind, "bf16")
    spec = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "cpu.yaml"))
    start = time.perf_counter()
    result = run_operators(inventory, spec, None, "bf16", model_source=name)
    return {"checks": len(result.ops.checks), "ops_checked_per_s": round(result.ops.ops_per_second, 2),
            "shrunk": sum("shrunk" in c.reason for c in result.ops.checks),
            "still_failing": [c.op for c in result.ops.failing], "notes": result.notes,
            "step_seconds": round(time.perf_counter() - start, 2)}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
