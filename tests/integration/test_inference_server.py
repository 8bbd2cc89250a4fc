"""A real `transformers serve` process on 127.0.0.1 and the real load client: the metrics agree
with what the server generated, continuous batching at concurrency 4 beats sequential requests,
the MLA model is batched in the engine's latent layout, a hybrid-attention model the engine cannot
batch is served through the fallback with the engine's own error as the finding, and no server
process is left after the step, whether it passed or failed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from day0.steps.inference.client import LoadRequest, LoadSettings, run_load
from day0.steps.inference.job import main
from day0.steps.inference.metrics import summarize
from day0.steps.inference.model import build_served_model, held_out_text, load_tokenizer, write_model_dir
from day0.steps.inference.result import InferenceResult
from day0.steps.inference.serve import InferenceRequest, run_inference
from day0.steps.inference.server import EngineConfig, ServingError, serve
from tests.fixtures.inference import cpu, hybrid_served, quick_inference, served

pytestmark = pytest.mark.integration


def _live_processes() -> list[tuple[int, int, str]]:
    """(pid, process group, command line) of every live process but this one. Zombies are left out:
    the engine's children are reparented to PID 1 when it dies, which reaps them when it gets to it."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state, _ppid, pgid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except OSError:
            continue
        if state != "Z":
            found.append((int(proc.name), int(pgid), cmdline))
    return found


def _processes_mentioning(text: str) -> list[int]:
    return [pid for pid, _, cmdline in _live_processes() if text in cmdline]


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(build_served_model(served()), served(), tmp_path_factory.mktemp("qwen") / "model")


def _requests(n: int, max_tokens: int) -> list[LoadRequest]:
    words = held_out_text().split()
    return [LoadRequest(prompt=" ".join(words[i * 7 : i * 7 + 12]), max_tokens=max_tokens) for i in range(n)]


def test_short_benchmark_against_a_real_server(qwen_dir: Path) -> None:
    tokenizer = load_tokenizer(served().tokenizer)
    requests = _requests(16, 24)
    with serve(EngineConfig(model_dir=qwen_dir, cache_blocks=64, block_size=32, max_batch_tokens=512)) as (
        server,
        finding,
    ):
        assert finding is None and server.config.continuous_batching
        pid = server.process.pid if server.process else -1
        runs = {
            c: asyncio.run(run_load(server.base_url, server.model, requests, LoadSettings(concurrency=c, warmup=1)))
            for c in (1, 4)
        }
    for run in runs.values():
        for request, r in zip(requests, run.records):
            assert r.ok, r.error
            assert r.ttft_s is not None and r.e2el_s is not None and 0 < r.ttft_s <= r.e2el_s
            assert r.output_tokens is not None and r.chunks <= r.output_tokens <= request.max_tokens
            if r.finish_reason == "length":  # it stopped at max_tokens: exactly that many were generated
                assert r.output_tokens == request.max_tokens
            assert r.prompt_tokens == len(tokenizer(request.prompt)["input_ids"])
            assert len(r.itl_s) == max(r.chunks - 1, 0)
    assert sum(r.chunks for run in runs.values() for r in run.records) > 16  # text really streamed
    sequential, batched = (summarize(runs[c].records, runs[c].duration_s) for c in (1, 4))
    assert sequential.completed == batched.completed == 16
    speedup = batched.output_throughput / sequential.output_throughput
    assert speedup > 1, f"concurrency 4 gave {speedup:.2f}x the sequential token rate: {sequential} {batched}"
    assert pid > 0 and not [p for p, pgid, _ in _live_processes() if pgid == pid]  # its whole process group
    assert not _processes_mentioning(str(qwen_dir))


def test_mla_model_is_batched_in_the_engines_latent_layout(tmp_path: Path) -> None:
    request = InferenceRequest(
        model="tiny-deepseek-v3",
        served=served("tiny-deepseek-v3"),
        inference=quick_inference(benchmark={"requests": 4, "warmup_requests": 0, "output_len": 8,
                                             "input_len": 16, "concurrency": [1, 2]}),
        platform=cpu(),
        work_dir=tmp_path,
    )  # fmt: skip
    # through the job entrypoint (`python -m day0.steps.inference.job REQUEST RESULT`), as a cluster runs it
    (tmp_path / "request.json").write_text(request.model_dump_json())
    assert main([str(tmp_path / "request.json"), str(tmp_path / "result.json")]) == 0
    result = InferenceResult.model_validate_json((tmp_path / "result.json").read_text())
    assert not _processes_mentioning(str(tmp_path))
    assert result.findings == [] and result.verdict == "pass", result.reasons
    config = served("tiny-deepseek-v3").config
    latent = (config["kv_lora_rank"] + config["qk_rope_head_dim"]) * config["num_hidden_layers"] * 4
    assert result.engine_cache is not None and result.engine_cache.continuous_batching
    assert result.engine_cache.bytes_per_token == latent == result.kv[0].bytes_per_token
    assert [p.summary.completed for p in result.sweep] == [4, 4]


def test_a_model_the_engine_cannot_batch_is_served_through_the_fallback(tmp_path: Path) -> None:
    # If a transformers release learns linear attention's cache, this fails: pick a layout it still lacks.
    request = InferenceRequest(
        model="tiny-qwen3-next",
        served=hybrid_served(),
        inference=quick_inference(benchmark={"requests": 4, "warmup_requests": 0, "output_len": 8,
                                             "input_len": 16, "concurrency": [1, 2]}),
        platform=cpu(),
        work_dir=tmp_path,
    )  # fmt: skip
    lines: list[str] = []
    result = run_inference(request, lines.append)
    assert not _processes_mentioning(str(tmp_path))
    assert len(result.findings) == 1, lines
    finding = result.findings[0]
    assert finding.feature.startswith("continuous batching")
    assert "linear_attention" in finding.error  # the engine's own words: no cache allocator for that layer type
    assert "without continuous batching" in finding.fallback
    assert any(line.startswith("Day-0 finding:") for line in lines)
    assert result.engine_cache is not None and not result.engine_cache.continuous_batching
    assert result.verdict == "warn" and any("Day-0 finding" in r for r in result.reasons)
    assert [p.summary.completed for p in result.sweep] == [4, 4]
    assert all(p.summary.failed == 0 for p in result.sweep)
    # The cache budget counts the one attention layer's K/V, and the linear layer's state per sequence.
    budget = result.kv[0]
    assert (budget.layout.layers, budget.layout.linear_layers) == (1, 1) and budget.state_bytes_per_sequence > 0
    report = result.to_markdown()
    assert "GQA (1 of 2 layers)" in report and "state in the 1 linear-attention layers" in report


def test_the_job_entrypoint_refuses_bad_arguments() -> None:
    assert main(["only-one-argument"]) == 2


class Boom(RuntimeError):
    pass


def test_the_server_is_gone_when_the_step_fails(tmp_path: Path) -> None:
    def fail_during_benchmark(message: str) -> None:
        if message.startswith("benchmark:"):
            assert _processes_mentioning(str(tmp_path)), "the server should be running here"
            raise Boom(message)

    request = InferenceRequest(
        model="tiny-qwen3-moe", served=served(), inference=quick_inference(), platform=cpu(), work_dir=tmp_path
    )
    with pytest.raises(Boom):
        run_inference(request, fail_during_benchmark)
    assert not _processes_mentioning(str(tmp_path))


def test_an_engine_that_cannot_start_raises_and_leaves_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    with pytest.raises(ServingError, match="exited with"), serve(EngineConfig(model_dir=broken, startup_timeout_s=120)):
        pass
    assert not _processes_mentioning(str(broken))
