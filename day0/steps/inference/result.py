"""Step 6's result: the quantisation's coverage and quality, the KV-cache budgets (ours beside the
engine's), the engine's findings, and the benchmark sweep against the SLO.

Verdict (`judge`): fail when quantisation quality is beyond `inference.quality`, when the engine
could not serve, when a sweep point completed no request, or when the heaviest sweep point misses
the p99 TTFT / TPOT targets (or the best point the throughput floor); warn when the engine needed a
fallback (a Day-0 finding) or some requests failed; else pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, Field

from day0.core.result import Judgement, StepResult, Verdict
from day0.model.kv_cache import KVLayout
from day0.steps.inference.config import SLO
from day0.steps.inference.kv_budget import KVBudget
from day0.steps.inference.metrics import LoadSummary
from day0.steps.inference.quality import QualityReport
from day0.steps.inference.quantize import QuantizationReport
from day0.steps.inference.server import EngineFinding, ReportedCache

if TYPE_CHECKING:
    from day0.plots import Panel

__all__ = ["EngineCache", "InferenceResult", "SweepPoint"]


class EngineCache(BaseModel):
    """The paged cache the engine was given, in its own layout (K/V heads; MLA: the latents)."""

    engine: str
    num_blocks: int
    block_size: int
    bytes_per_token: float = Field(description="Per token, all layers, at the served model's fp32 (see kv_budget).")
    continuous_batching: bool
    reported: ReportedCache | None = Field(None, description="The cache the engine says it built (vLLM).")
    difference: str = Field("", description="The engine's cache beside day0's request, and why they differ.")

    @property
    def max_tokens(self) -> int:
        return self.num_blocks * self.block_size


class SweepPoint(BaseModel):
    concurrency: int
    request_rate: float | None
    summary: LoadSummary


class InferenceResult(StepResult):
    """Step 6's result (see the module docstring for the verdict)."""

    STEP: ClassVar[str] = "inference"

    model: str
    served: str = Field(description="What was served (trial checkpoint or scaled-down model).")
    engine: str
    device: str
    quantization: str
    quantized: QuantizationReport | None = None
    quality: QualityReport | None = None
    kv: list[KVBudget] = Field(default=[])
    engine_cache: EngineCache | None = None
    findings: list[EngineFinding] = Field(default=[])
    error: str | None = Field(None, description="Why serving failed, with the engine's words.")
    slo: SLO
    sweep: list[SweepPoint] = Field(default=[])
    startup_s: float | None = Field(None, description="Engine launch to its first answer on /health, s.")
    notes: list[str] = Field(default=[])
    seconds: float

    def _slo_reasons(self) -> tuple[list[str], list[str]]:
        """(failures, passes) of the SLO: p99s at the heaviest sweep point, throughput at the best."""
        if not self.sweep:
            return [], []
        heavy, slo = max(self.sweep, key=lambda p: p.concurrency), self.slo
        s = heavy.summary
        fails: list[str] = []
        passes: list[str] = []
        checks = [
            ("TTFT", s.ttft.p99_ms if s.ttft else None, slo.ttft_p99_ms),
            ("TPOT", s.tpot.p99_ms if s.tpot else None, slo.tpot_p99_ms),
        ]
        for name, value, limit in checks:
            if value is None:
                continue
            line = f"p99 {name} {value:.1f} ms at concurrency {heavy.concurrency} (target <= {limit:g} ms)"
            (passes if value <= limit else fails).append(line)
        if slo.min_throughput_tok_s is not None:
            best = max(p.summary.output_throughput for p in self.sweep)
            line = f"best output throughput {best:.1f} tok/s (target >= {slo.min_throughput_tok_s:g} tok/s)"
            (passes if best >= slo.min_throughput_tok_s else fails).append(line)
        return fails, passes

    def judge(self) -> Judgement:
        fails: list[str] = []
        warns: list[str] = []
        info: list[str] = []
        if self.error:
            fails.append(f"serving failed: {self.error}")
        elif not self.sweep:
            fails.append("no benchmark point was measured")
        if self.quality is not None:
            fails += self.quality.failures
            if self.quality.passed:
                q = self.quality
                info.append(
                    f"quantised ({self.quantization}) quality within tolerance: perplexity "
                    f"{q.perplexity_reference:.3f} -> {q.perplexity_quantized:.3f} ({q.perplexity_increase:+.3%}), "
                    f"greedy agreement {q.token_agreement:.2%}"
                )
        if self.quantized is not None:
            qr = self.quantized
            info.append(
                f"{qr.fraction_quantized:.1%} of the weights quantised, storage {qr.bytes_before / 2**20:.2f} -> "
                f"{qr.bytes_after / 2**20:.2f} MiB ({qr.size_ratio:.3f}x)"
            )
        for f in self.findings:
            warns.append(f"Day-0 finding: {f.engine} cannot use {f.feature} for this model ({f.error}); {f.fallback}")
        for p in self.sweep:
            s = p.summary
            if s.completed == 0:
                fails.append(f"concurrency {p.concurrency}: no request completed ({'; '.join(s.errors)})")
            elif s.failed:
                warns.append(f"concurrency {p.concurrency}: {s.failed} request(s) failed ({'; '.join(s.errors)})")
        slo_fails, slo_passes = self._slo_reasons()
        fails += slo_fails
        info += slo_passes
        verdict: Verdict = "fail" if fails else "warn" if warns else "pass"
        return Judgement(verdict=verdict, reasons=fails + warns + info, headline=self._headline())

    def _headline(self) -> dict[str, str]:
        out = {}  # the first two are the scorecard's glance
        if self.sweep:
            heavy = max(self.sweep, key=lambda p: p.concurrency)
            s = heavy.summary
            if s.ttft and s.tpot:
                out["p99 TTFT / TPOT"] = (
                    f"{s.ttft.p99_ms / 1000:.2f} s / {s.tpot.p99_ms:.1f} ms at concurrency {heavy.concurrency}"
                )
            out["best throughput"] = f"{max(p.summary.output_throughput for p in self.sweep):.1f} tok/s"
        out["engine"] = self.engine + (" (fallback)" if self.findings else "")
        if self.quantized is not None:
            out["quantised"] = f"{self.quantization}, {self.quantized.fraction_quantized:.0%} of weights"
        return out

    def files(self) -> dict[str, bytes]:
        """latency-throughput.png: p99 TTFT (seconds) and p99 TPOT (milliseconds), each on its own axis."""
        points = [p for p in self.sweep if p.summary.ttft and p.summary.tpot]
        if not points:
            return {}
        from day0.plots import panels

        xs = [p.summary.output_throughput for p in points]
        labels = [f"concurrency {p.concurrency}" for p in points]
        ttft = [p.summary.ttft.p99_ms / 1000 for p in points if p.summary.ttft]
        tpot = [p.summary.tpot.p99_ms for p in points if p.summary.tpot]
        return {
            "latency-throughput.png": panels(
                f"{self.model} on {self.engine}: p99 latency vs output throughput",
                [
                    _latency_panel("TTFT p99, s", xs, ttft, labels, self.slo.ttft_p99_ms / 1000, "s"),
                    _latency_panel("TPOT p99, ms", xs, tpot, labels, self.slo.tpot_p99_ms, "ms"),
                ],
                "output throughput, tokens/s",
                side_by_side=True,
            )
        }

    def to_markdown(self) -> str:
        lines = [
            f"# Step 6: serving `{self.model}`: **{self.verdict.upper()}**",
            "",
            *[f"- {r}" for r in self.reasons],
            "",
            f"- served: {self.served} on {self.engine} ({self.device}), quantisation {self.quantization}"
            + ("" if self.startup_s is None else f", started in {self.startup_s:.0f} s"),
            *[f"- note: {n}" for n in self.notes + (self.quantized.notes if self.quantized else [])],
        ]
        if self.kv:
            lines += [
                "",
                "## KV-cache budget (per accelerator)",
                "",
                "| for | attention | TP | bytes/token | weights | cache | max tokens | max seqs @ context |",
                "|---|---|---:|---:|---:|---:|---:|---:|",
            ]
            lines += [
                f"| {b.label} | {_attention(b.layout)} | {b.tensor_parallel} | {b.bytes_per_token:,.0f} | "
                f"{b.weight_bytes / 2**30:.2f} GiB | {b.cache_bytes / 2**30:.2f} GiB | {b.max_tokens:,} | "
                f"{b.max_sequences:,} @ {b.context_len:,} |"
                for b in self.kv
            ]
            lines += [f"\n{b.label}: {text}" for b in self.kv if (text := _per_sequence(b))]
            if self.engine_cache:
                e = self.engine_cache
                lines += [
                    "",
                    f"Engine ({e.engine}): {e.num_blocks} blocks x {e.block_size} tokens = {e.max_tokens:,} tokens, "
                    f"{e.bytes_per_token:,.0f} bytes/token"
                    + ("" if e.continuous_batching else " (configured; unused without continuous batching)"),
                ]
                lines += [f"\n{e.difference}"] if e.difference else []
        if self.sweep:
            lines += ["", "![latency vs throughput](latency-throughput.png)", "", *_sweep_table(self.sweep)]
        return "\n".join(lines) + "\n"


def _latency_panel(ylabel: str, xs: list[float], ys: list[float], labels: list[str], target: float, unit: str) -> Panel:
    """One latency on its own axis; its SLO target drawn when it is on the same scale as the data,
    else named in the panel's title (a line far above would flatten the curve)."""
    from day0.plots import Panel

    near = target <= 1.5 * max(ys, default=0)
    return Panel(
        ylabel,
        {ylabel.split(",")[0]: (xs, ys)},
        targets={f"target {target:g} {unit}": target} if near else {},
        point_labels=labels,
        title="" if near else f"target <= {target:g} {unit} (above the scale)",
    )


def _ms(d: object, field: str) -> str:
    return "-" if d is None else f"{getattr(d, field):.1f}"


def _sweep_table(sweep: list[SweepPoint]) -> list[str]:
    lines = [
        "| concurrency | done / failed | req/s | out tok/s | goodput | TTFT p50 / p99 ms | TPOT p50 / p99 ms | "
        "ITL p99 ms | E2EL p99 ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in sweep:
        s = p.summary
        lines.append(
            f"| {p.concurrency} | {s.completed} / {s.failed} | {s.request_throughput:.2f} | "
            f"{s.output_throughput:.1f} | {'-' if s.goodput is None else f'{s.goodput:.2f}'} | "
            f"{_ms(s.ttft, 'p50_ms')} / {_ms(s.ttft, 'p99_ms')} | {_ms(s.tpot, 'p50_ms')} / {_ms(s.tpot, 'p99_ms')} | "
            f"{_ms(s.itl, 'p99_ms')} | {_ms(s.e2el, 'p99_ms')} |"
        )
    return lines


def _attention(layout: KVLayout) -> str:
    """The attention kind, and for a hybrid model how many of its layers keep every token."""
    total = layout.layers + layout.window_layers + layout.linear_layers
    return layout.kind if layout.layers == total else f"{layout.kind} ({layout.layers} of {total} layers)"


def _per_sequence(b: KVBudget) -> str:
    """What each sequence keeps beyond its tokens in the full layers (counted in max seqs), or ''."""
    parts = []
    if b.window_bytes_per_sequence:
        parts.append(
            f"{b.window_bytes_per_sequence / 2**20:,.1f} MiB in the {b.layout.window_layers} windowed layers "
            f"(the last {b.layout.window_tokens:,} tokens)"
        )
    if b.state_bytes_per_sequence:
        parts.append(
            f"{b.state_bytes_per_sequence / 2**20:,.1f} MiB of state in the {b.layout.state_layers} "
            "linear-attention layers"
        )
    return f"each sequence also keeps {' and '.join(parts)}, counted in max seqs." if parts else ""
