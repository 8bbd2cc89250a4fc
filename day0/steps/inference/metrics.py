"""Serving metrics as pure functions, with the definitions of vLLM's `bench serve` so the numbers compare:

- TTFT: request start to the first streamed chunk that carries text (a content-free role chunk is not a token);
  when the output decodes to no text at all (special tokens only), the final event that reports its tokens;
- ITL: the gaps between text chunks, pooled over requests (a chunk may hold several tokens);
- TPOT: (E2EL - TTFT) / (output tokens - 1), per request, for requests with more than one output token;
- E2EL: request start to the last event; output tokens come from the server's `usage`, not from counting chunks;
- request/token throughput: completed requests and their tokens over the wall time of the measured window;
- goodput: completed requests per second that meet every SLO (TTFT and TPOT at their limits).

Failed requests (an HTTP error, an error event, a dropped stream) are counted, never timed: a dead
server's fast 503s must not read as low latency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

__all__ = ["Distribution", "LoadSummary", "RequestRecord", "distribution", "percentile", "summarize", "tpot_s"]

PERCENTILES = (50, 90, 99)


class RequestRecord(BaseModel):
    """One request as the client saw it (times in seconds from its own start)."""

    prompt_tokens: int | None = Field(None, description="From the server's usage.")
    output_tokens: int | None = Field(None, description="From the server's usage.")
    ttft_s: float | None = None
    e2el_s: float | None = None
    itl_s: list[float] = Field(default=[], description="Gaps between consecutive text chunks.")
    chunks: int = Field(0, description="Streamed chunks that carried text.")
    finish_reason: str | None = None
    error: str | None = Field(
        None, description="Why it failed (HTTP status, error event, timeout); None if it completed."
    )

    @property
    def ok(self) -> bool:
        return self.error is None


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def tpot_s(e2el_s: float, ttft_s: float, output_tokens: int) -> float | None:
    """Time per output token after the first: (E2EL - TTFT) / (tokens - 1); None for one token."""
    if output_tokens < 2:
        return None
    return (e2el_s - ttft_s) / (output_tokens - 1)


class Distribution(BaseModel):
    """Mean and percentiles of one metric, in milliseconds."""

    count: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


def distribution(values_s: Sequence[float]) -> Distribution | None:
    """The distribution of `values_s` (seconds) in milliseconds; None when there are none."""
    if not values_s:
        return None
    ms = [v * 1000 for v in values_s]
    p50, p90, p99 = (percentile(ms, q) for q in PERCENTILES)
    return Distribution(count=len(ms), mean_ms=sum(ms) / len(ms), p50_ms=p50, p90_ms=p90, p99_ms=p99, max_ms=max(ms))


class LoadSummary(BaseModel):
    """One benchmark run's overall figures (vLLM `bench serve`'s)."""

    completed: int
    failed: int
    errors: list[str] = Field(default=[], description="Distinct failure messages, at most a few.")
    duration_s: float
    input_tokens: int
    output_tokens: int
    request_throughput: float = Field(description="Completed requests per second.")
    output_throughput: float = Field(description="Output tokens per second.")
    total_token_throughput: float = Field(description="Input plus output tokens per second.")
    goodput: float | None = Field(None, description="Completed requests per second meeting every SLO.")
    ttft: Distribution | None = None
    tpot: Distribution | None = None
    itl: Distribution | None = None
    e2el: Distribution | None = None


def _complete(r: RequestRecord) -> bool:
    """Completed: no error, some text streamed, and the server's usage counted the output."""
    return r.ok and r.ttft_s is not None and r.e2el_s is not None and bool(r.output_tokens)


def _meets(r: RequestRecord, ttft_ms: float, tpot_ms: float) -> bool:
    assert r.ttft_s is not None and r.e2el_s is not None and r.output_tokens is not None
    per_token = tpot_s(r.e2el_s, r.ttft_s, r.output_tokens)
    return r.ttft_s * 1000 <= ttft_ms and (per_token is None or per_token * 1000 <= tpot_ms)


def summarize(
    records: Sequence[RequestRecord], duration_s: float, slo_ms: tuple[float, float] | None = None
) -> LoadSummary:
    """Overall figures of `records` measured over `duration_s`; goodput under `slo_ms` = (TTFT, TPOT) limits."""
    if duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    done = [r for r in records if _complete(r)]
    failed = [r for r in records if not _complete(r)]
    inputs = sum(r.prompt_tokens or 0 for r in done)
    outputs = sum(r.output_tokens or 0 for r in done)
    tpots = [t for r in done if (t := tpot_s(r.e2el_s or 0, r.ttft_s or 0, r.output_tokens or 0)) is not None]
    good = None if slo_ms is None else sum(_meets(r, *slo_ms) for r in done) / duration_s
    return LoadSummary(
        completed=len(done),
        failed=len(failed),
        errors=sorted({r.error or "incomplete response (no text or no usage)" for r in failed})[:5],
        duration_s=duration_s,
        input_tokens=inputs,
        output_tokens=outputs,
        request_throughput=len(done) / duration_s,
        output_throughput=outputs / duration_s,
        total_token_throughput=(inputs + outputs) / duration_s,
        goodput=good,
        ttft=distribution([r.ttft_s for r in done if r.ttft_s is not None]),
        tpot=distribution(tpots),
        itl=distribution([gap for r in done for gap in r.itl_s]),
        e2el=distribution([r.e2el_s for r in done if r.e2el_s is not None]),
    )
