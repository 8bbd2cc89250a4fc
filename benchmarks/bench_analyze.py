"""Step 1 timing per model config: resolve + meta build + structure + operator capture + probe,
each model in a fresh interpreter (as `day0 analyze` runs), against `python -c 'import torch,
transformers'` measured in the same run (target: `day0 analyze` <= 1.5x it), with what each process
printed on stderr besides its progress line (target: nothing: no library warnings); plus in-process
times once warm.

Beside them, the floor: a process that only imports the transformers modeling module `day0 analyze`
instantiates (`from transformers.models.<type> import modeling_<type>`, which pulls in torch._dynamo,
torch.distributed.tensor, torchao and accelerate through transformers' own imports), as a ratio to the
same baseline, and each model's `day0 analyze` as a ratio to its floor: how much of the gap is ours.

Both commands run with a bytecode cache, as an installed package has (`bench_planner._bytecode_env`),
after one untimed run of each; the baseline is timed between the models' runs (before, between and
after), so drifting load lands on both sides. Ratios are by wall time and by the processes' own CPU
time (getrusage), the latter less disturbed by other load on a shared machine.

    python -m benchmarks.run analyze
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_planner import _bytecode_env, _children_cpu

MODELS = ["deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "mixtral-8x7b", "llama-3-8b", "llama-3.1-405b", "tiny-deepseek-v3"]
BASELINE = [sys.executable, "-c", "import torch, transformers"]
TARGET_RATIO = 1.5
ROOT = Path(__file__).resolve().parent.parent


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall s, CPU s, the finished process) of one run of `cmd`."""
    t, c = time.perf_counter(), _children_cpu()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - t, _children_cpu() - c, proc


def _modeling_import(model_type: str) -> list[str]:
    """The floor: import the modeling module of `model_type`, nothing else."""
    return [
        sys.executable,
        "-c",
        f"import torch, transformers; from transformers.models.{model_type} import modeling_{model_type}",
    ]


def _model_type(name: str) -> str:
    return json.loads((ROOT / "configs" / "models" / name / "config.json").read_text())["model_type"]


def _printed(stderr: str) -> list[str]:
    """What a run printed on stderr (the progress spinner is transient: it leaves blank lines only)."""
    return [line for line in stderr.splitlines() if line.strip()]


def cold_processes() -> dict:
    """Each model's `day0 analyze --json` in a fresh process, against the baseline import."""
    out: dict = {"models": {}}
    base_wall, base_cpu = [], []
    with tempfile.TemporaryDirectory() as tmp:
        env = _bytecode_env(Path(tmp) / "pycache")
        cli = [sys.executable, "-m", "cli", "analyze"]
        for cmd in (BASELINE, [*cli, "tiny-deepseek-v3", "--json"]):  # fills the bytecode and file caches
            subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, check=True)
        for i, name in enumerate(MODELS):
            if i % 2 == 0:
                w, c, _ = _timed(BASELINE, env)
                base_wall.append(w)
                base_cpu.append(c)
            wall, cpu, proc = _timed([*cli, name, "--platform", "ascend-910b", "--json"], env)
            structure = json.loads(proc.stdout)["structure"]
            out["models"][name] = {
                "cli_seconds_cold_process": round(wall, 2),
                "cli_cpu_s": round(cpu, 2),
                "stderr_lines": _printed(proc.stderr),
                "params_total_b": round(structure["params_total"] / 1e9, 3),
                "params_active_b": round(structure["params_active"] / 1e9, 3),
            }
        w, c, _ = _timed(BASELINE, env)
        floors = {t: _timed(_modeling_import(t), env)[:2] for t in sorted({_model_type(m) for m in MODELS})}
    base_wall.append(w)
    base_cpu.append(c)
    wall, cpu = statistics.median(base_wall), statistics.median(base_cpu)
    for name, row in out["models"].items():
        row["ratio"] = round(row["cli_seconds_cold_process"] / wall, 2)
        row["cpu_ratio"] = round(row["cli_cpu_s"] / cpu, 2)
        row["ratio_to_floor"] = round(row["cli_seconds_cold_process"] / floors[_model_type(name)][0], 2)
    out["floor"] = {
        t: {
            "wall_s": round(fw, 2),
            "cpu_s": round(fc, 2),
            "ratio": round(fw / wall, 2),
            "cpu_ratio": round(fc / cpu, 2),
        }
        for t, (fw, fc) in floors.items()
    }
    ratios = [r["ratio"] for r in out["models"].values()]
    cpu_ratios = [r["cpu_ratio"] for r in out["models"].values()]
    out["baseline"] = {
        "command": "python -c 'import torch, transformers'",
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "runs": len(base_wall),
    }
    out["ratio_range"] = [min(ratios), max(ratios)]
    out["cpu_ratio_range"] = [min(cpu_ratios), max(cpu_ratios)]
    out["under_target"] = max(ratios) <= TARGET_RATIO
    out["under_target_cpu"] = max(cpu_ratios) <= TARGET_RATIO
    out["no_warnings"] = not any(r["stderr_lines"] for r in out["models"].values())
    return out


def run() -> dict:
    from day0.spec.pipeline import ModelSpec, load_platform
    from day0.steps.analyze.run import analyze_model

    results = cold_processes()
    platform = load_platform("ascend-910b")
    analyze_model(ModelSpec(source="tiny-deepseek-v3"), platform)  # warm imports
    for name in MODELS:
        result = analyze_model(ModelSpec(source=name), platform)
        row = results["models"][name]
        row["in_process_seconds"] = round(result.seconds, 2)
        row["capture_seconds"] = round(result.inventory.capture_seconds, 3)
        row["ops"] = len(result.inventory.ops)
    return results | {
        "target": f"every model's `day0 analyze` <= {TARGET_RATIO}x `python -c 'import torch, transformers'` "
        "(wall; CPU beside it), nothing printed on stderr; deepseek-v3 < 10 s on 2 cores",
        "floor_note": "floor: importing the modeling module alone, as a ratio to the same baseline; "
        "ratio_to_floor: `day0 analyze` against the floor of its model type",
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
