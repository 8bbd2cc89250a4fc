"""Step 6's pure maths: percentiles, TPOT, goodput and the overall figures on known inputs, and the
gamma arrival process."""

from __future__ import annotations

import statistics

import pytest

from day0.steps.inference.client import arrival_gaps
from day0.steps.inference.metrics import RequestRecord, distribution, percentile, summarize, tpot_s


def test_percentile_interpolates_like_numpy() -> None:
    values = [10.0, 20.0, 30.0, 40.0]
    assert percentile(values, 0) == 10
    assert percentile(values, 100) == 40
    assert percentile(values, 50) == 25  # halfway between ranks 1 and 2
    assert percentile(values, 99) == pytest.approx(39.7)  # rank 2.97
    assert percentile([5.0], 99) == 5
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_tpot_excludes_the_first_token() -> None:
    assert tpot_s(e2el_s=1.0, ttft_s=0.1, output_tokens=10) == pytest.approx(0.1)
    assert tpot_s(e2el_s=1.0, ttft_s=0.1, output_tokens=1) is None


def _record(ttft: float, e2el: float, tokens: int, prompt: int = 8) -> RequestRecord:
    return RequestRecord(prompt_tokens=prompt, output_tokens=tokens, ttft_s=ttft, e2el_s=e2el, itl_s=[0.01] * 3)


def test_summary_counts_failures_apart_and_goodput_applies_every_slo() -> None:
    records = [
        _record(0.1, 1.0, 10),  # TTFT 100 ms, TPOT 100 ms: meets (200, 120)
        _record(0.3, 1.2, 10),  # TTFT 300 ms: misses TTFT
        _record(0.1, 2.0, 11),  # TPOT 190 ms: misses TPOT
        RequestRecord(error="HTTP 503: cb_worker_dead"),  # a dead server's fast answer: never timed
    ]
    s = summarize(records, duration_s=2.0, slo_ms=(200, 120))
    assert (s.completed, s.failed) == (3, 1)
    assert s.errors == ["HTTP 503: cb_worker_dead"]
    assert s.output_tokens == 31 and s.input_tokens == 24
    assert s.request_throughput == pytest.approx(1.5)
    assert s.output_throughput == pytest.approx(15.5)
    assert s.total_token_throughput == pytest.approx(27.5)
    assert s.goodput == pytest.approx(0.5)  # one request of the three in 2 s
    assert s.ttft is not None and s.ttft.count == 3 and s.ttft.max_ms == pytest.approx(300)
    assert s.tpot is not None and s.tpot.p50_ms == pytest.approx(100)
    assert s.itl is not None and s.itl.count == 9


def test_a_request_without_usage_or_text_is_not_completed() -> None:
    s = summarize([RequestRecord(ttft_s=0.1, e2el_s=0.2), RequestRecord(output_tokens=3)], duration_s=1.0)
    assert (s.completed, s.failed) == (0, 2) and s.ttft is None and s.goodput is None


def test_distribution_is_in_milliseconds() -> None:
    d = distribution([0.001, 0.002, 0.003])
    assert d is not None and d.mean_ms == pytest.approx(2) and d.p50_ms == pytest.approx(2)
    assert distribution([]) is None


def test_gamma_arrivals_have_the_asked_rate_and_burstiness() -> None:
    poisson = arrival_gaps(20_000, rate=10.0, burstiness=1.0, seed=1)
    bursty = arrival_gaps(20_000, rate=10.0, burstiness=0.25, seed=1)
    assert statistics.fmean(poisson) == pytest.approx(0.1, rel=0.05)
    assert statistics.fmean(bursty) == pytest.approx(0.1, rel=0.05)
    # gamma(k, theta) has CV^2 = 1/k: 1 for Poisson, 4 for burstiness 0.25
    assert statistics.pvariance(poisson) / 0.01 == pytest.approx(1, rel=0.1)
    assert statistics.pvariance(bursty) / 0.01 == pytest.approx(4, rel=0.15)
    assert arrival_gaps(3, rate=None, burstiness=1.0, seed=0) == [0.0, 0.0, 0.0]


def test_only_chunks_with_text_count_the_role_chunk_does_not() -> None:
    from day0.steps.inference.client import LoadRequest, _payload, _text

    assert _text({"index": 0, "delta": {"role": "assistant"}}) == ""  # chat's role chunk, sent before prefill
    assert _text({"index": 0, "delta": {"content": "Hi"}}) == "Hi"
    assert _text({"index": 0, "text": " there"}) == " there"
    assert _text({"index": 0, "text": "", "finish_reason": "length"}) == ""
    chat = _payload("m", LoadRequest(prompt="p", max_tokens=4), "chat")
    assert chat["messages"] == [{"role": "user", "content": "p"}] and "prompt" not in chat
    assert chat["stream_options"] == {"include_usage": True}
