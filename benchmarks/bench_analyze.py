"""Step 1 timing per model config: resolve + meta build + structure + operator capture + probe,
each model in a fresh interpreter (as `day0 analyze` runs), plus in-process times once warm."""

from __future__ import annotations

import json
import subprocess
import sys
import time

MODELS = ["deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "mixtral-8x7b", "llama-3-8b", "llama-3.1-405b", "tiny-deepseek-v3"]


def run() -> dict:
    from day0.spec import ModelSpec, load_platform
    from day0.steps.analyze.run import analyze_model

    results: dict[str, dict] = {}
    for name in MODELS:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "cli", "analyze", name, "--platform", "ascend-910b", "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        cold = time.perf_counter() - start
        structure = json.loads(proc.stdout)["structure"]
        results[name] = {
            "cli_seconds_cold_process": round(cold, 2),
            "params_total_b": round(structure["params_total"] / 1e9, 3),
            "params_active_b": round(structure["params_active"] / 1e9, 3),
        }
    platform = load_platform("ascend-910b")
    analyze_model(ModelSpec(source="tiny-deepseek-v3"), platform)  # warm imports
    for name in MODELS:
        result = analyze_model(ModelSpec(source=name), platform)
        results[name]["in_process_seconds"] = round(result.seconds, 2)
        results[name]["capture_seconds"] = round(result.inventory.capture_seconds, 3)
        results[name]["ops"] = len(result.inventory.ops)
    return {"models": results, "target": "day0 analyze deepseek-v3 < 10 s on 2 cores"}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
