"""`make gpu-check`: the pipeline on one CUDA GPU (H100 or H200), writing one JSON of figures.

    python -m benchmarks.gpu_check --out DIR [--platform h100] [--dry-run]

What it measures, from the repository's own files (the spec below, `day0 calibrate`, `day0 run`):
- step 2 on CUDA kernels: every operator of the tiny MoE's training step at bf16 against the fp64
  CPU reference (worst relative RMSE, failures);
- the trial on the GPU: the candidate's tokens/s and its MFU (6 x parameters x tokens/s over the
  platform's bf16 peak), beside step 3's predicted step time;
- `day0 calibrate` on the GPU (its profile as JSON);
- step 6 with `inference.engine: vllm` over the SLO sweep (vLLM's environment first: `make engines`
  builds the CPU one; here `python -m day0.steps.inference.engine_env vllm cuda`).

`--dry-run` (CPU, `make test-fast`) checks the wiring without running anything heavy: the spec
validates for the GPU platform with vLLM as its engine, the commands are the ones a run makes, and
the figures are read from whatever results the store holds (none: each figure says it is missing).
Everything goes to DIR/gpu-check.json; the store, logs and the spec beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

BUDGET_S = 540  # the whole check within 10 minutes, set-up included: what is left after it is the set-up's


def pipeline_spec(platform: str, store: Path) -> dict[str, Any]:
    """The tiny Qwen3-MoE (GQA: an attention vLLM serves) through steps 2, 3, 5 and 6 on `platform`."""
    return {
        "apiVersion": "day0/v1",
        "kind": "AdaptationPipeline",
        "metadata": {"name": f"gpu-check-{platform}"},
        "model": {"source": "tiny-qwen3-moe"},
        "platform": platform,
        "cluster": "local",
        "training": {"seq_len": 128, "global_batch": 8, "micro_batch": 4, "precision": {"compute": "bf16"}},
        "parallel": "auto",
        "validation": {"reference_dtype": "fp64"},
        "trial": {"steps": 30, "workers": 1, "seq_len": 128, "micro_batch": 4},
        "inference": {
            "engine": "vllm",
            "startup_timeout_s": 300,
            "slo": {"ttft_p99_ms": 2000, "tpot_p99_ms": 100},
            "benchmark": {"requests": 32, "input_len": 128, "output_len": 64, "concurrency": [1, 4, 8]},
        },
        "storage": f"file://{store}",
    }


def commands(spec_path: Path, platform: str) -> dict[str, list[str]]:
    day0 = [sys.executable, "-m", "cli"]
    return {
        "engine": [sys.executable, "-m", "day0.steps.inference.engine_env", "vllm", "cuda"],
        "calibrate": [*day0, "calibrate", platform, "--workers", "1", "--json"],
        "run": [*day0, "run", str(spec_path), "--fresh", "--json"],
    }


def _results(store: Path) -> dict[str, dict[str, Any]]:
    """step -> its result.json from the store (the newest run of each step)."""
    found = sorted(store.glob("**/*/result.json"), key=lambda p: p.stat().st_mtime)
    return {p.parent.name: json.loads(p.read_text()) for p in found}


def _operators(r: dict[str, Any]) -> dict[str, Any]:
    checks = (r.get("ops") or {}).get("checks", [])
    measured = [c for c in checks if c.get("metrics")]
    worst = max(measured, key=lambda c: c["metrics"]["rel_rmse"], default=None)
    return {
        "verdict": r.get("verdict"),
        "ops_checked": len(checks),
        "ops_failed": sorted(c["op"] for c in checks if c.get("status") == "fail"),
        "worst_rel_rmse": worst and {"op": worst["op"], "dtype": worst["dtype"], **worst["metrics"]},
    }


def _trial(r: dict[str, Any], bf16_tflops: float) -> dict[str, Any]:
    tps = (r.get("candidate") or {}).get("tokens_per_s")
    params = (r.get("scaled") or {}).get("parameters")
    cost = r.get("cost_check") or {}
    return {
        "verdict": r.get("verdict"),
        "device": (r.get("candidate") or {}).get("device"),
        "tokens_per_s": tps,
        "mfu": tps * 6 * params / (bf16_tflops * 1e12) if tps and params else None,
        "mfu_basis": "6 x parameters x tokens/s over the platform's bf16 peak (dense count: an MoE's is lower)",
        "predicted_step_s": cost.get("predicted_step_s"),
        "measured_step_s": cost.get("measured_step_s"),
        "prediction_source": cost.get("source"),
    }


def _inference(r: dict[str, Any]) -> dict[str, Any]:
    points = [
        {
            "concurrency": p["concurrency"],
            "output_tok_s": p["summary"]["output_throughput"],
            "ttft_p99_ms": (p["summary"].get("ttft") or {}).get("p99_ms"),
            "tpot_p99_ms": (p["summary"].get("tpot") or {}).get("p99_ms"),
            "completed": p["summary"]["completed"],
        }
        for p in r.get("sweep", [])
    ]
    return {
        "verdict": r.get("verdict"),
        "engine": r.get("engine"),
        "error": r.get("error"),
        "sweep": points,
        "engine_cache": r.get("engine_cache"),
        "reasons": r.get("reasons"),
    }


def figures(store: Path, bf16_tflops: float) -> dict[str, Any]:
    """The check's figures from the run's results; a step without a result is named as missing."""
    results = _results(store) if store.exists() else {}
    readers = {
        "operators": _operators,
        "trial": lambda r: _trial(r, bf16_tflops),
        "inference": _inference,
    }
    return {
        step: read(results[step]) if step in results else {"missing": f"no {step}/result.json under {store}"}
        for step, read in readers.items()
    }


def _run(name: str, command: list[str], out: Path, deadline: float) -> dict[str, Any]:
    t0 = time.monotonic()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=max(deadline - t0, 1), check=False
        )
    except subprocess.TimeoutExpired:
        return {"command": command, "error": "out of the check's time budget", "seconds": time.monotonic() - t0}
    (out / f"{name}.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    return {"command": command, "exit": done.returncode, "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check"))
    parser.add_argument("--platform", default="h100", help="configs/platforms name of the GPU (h100 for an H200 too)")
    parser.add_argument("--dry-run", action="store_true", help="check the wiring on this CPU; run nothing heavy")
    args = parser.parse_args(argv)
    from cli.preflight import preflight

    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "gpu-check.yaml"
    spec_path.write_text(yaml.safe_dump(pipeline_spec(args.platform, out / "store"), sort_keys=False))
    spec, _ = preflight(str(spec_path), None, check_store=False)  # `day0 validate`'s checks: vLLM on the platform too
    peak = spec.platform.hardware.figure("bf16_tflops", args.platform)
    planned = commands(spec_path, args.platform)
    report: dict[str, Any] = {"platform": args.platform, "dry_run": args.dry_run, "commands": planned}
    t0 = time.monotonic()
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            print("gpu-check: no CUDA device here (use --dry-run on a CPU)", file=sys.stderr)
            return 2
        report["device"] = torch.cuda.get_device_name(0)
        deadline = t0 + BUDGET_S
        report["steps"] = {name: _run(name, command, out, deadline) for name, command in planned.items()}
        calibrate_log = out / "calibrate.log"
        text = calibrate_log.read_text().split("\n--- stderr ---\n")[0] if calibrate_log.exists() else ""
        try:
            report["calibrate"] = json.loads(text)
        except json.JSONDecodeError:
            report["calibrate"] = {"missing": "day0 calibrate printed no JSON (see calibrate.log)"}
    report["figures"] = figures(out / "store", peak)
    report["seconds"] = round(time.monotonic() - t0, 1)
    (out / "gpu-check.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(out / "gpu-check.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
