"""Step 1's typed result: what later steps read (the resolved model, its structure, the operator
inventory and the coverage diff) and its verdict."""

from __future__ import annotations

from day0.core.result import Judgement, StepResult
from day0.core.training import MASTER_DTYPE
from day0.model.release import ReleaseCheck
from day0.model.source import ResolvedModel
from day0.model.structure import ModelStructure
from day0.steps.analyze.coverage import CoverageReport
from day0.steps.analyze.inventory import OpInventory

__all__ = ["AnalyzeResult"]


class AnalyzeResult(StepResult):
    STEP = "analyze"

    model: ResolvedModel
    structure: ModelStructure
    inventory: OpInventory
    coverage: CoverageReport
    seconds: float
    release: ReleaseCheck | None = None  # the release's own files beside config.json (day0.model.release)

    def files(self) -> dict[str, bytes]:
        from day0.plots import grouped_bars

        comps = self.structure.components
        return {
            "params.png": grouped_bars(
                f"{self.structure.model}: parameters by component",
                list(comps),
                {
                    "total": [c.total / 1e9 for c in comps.values()],
                    "active per token": [c.active / 1e9 for c in comps.values()],
                },
                "billions",
                log=True,
            )
        }

    def to_markdown(self) -> str:
        s, cov = self.structure, self.coverage
        lines = [
            f"# Step 1: analyze `{s.model}`",
            "",
            f"- architecture: `{s.architecture}` ({s.model_type}), {s.num_layers} layers, hidden {s.hidden_size}, "
            f"vocab {s.vocab_size}, max context {s.max_context}",
            f"- parameters: **{_b(s.params_total)} total**, **{_b(s.params_active)} active per token**",
            f"- attention: {s.attention_kind}, {s.num_attention_heads} heads, {s.num_kv_heads} KV heads, "
            f"head dim {s.head_dim}",
        ]
        if s.moe:
            lines.append(
                f"- MoE: {s.moe.num_experts} routed experts, top-{s.moe.top_k}, "
                f"{s.moe.num_shared_experts} shared; {s.moe.num_moe_layers} MoE / "
                f"{s.moe.num_dense_layers} dense layers"
            )
        lines.append(f"- KV cache per token: {s.kv_cache_bytes_per_token['bf16'] / 1024:.1f} KiB at bf16")
        lines += [f"- note: {n}" for n in s.notes]
        lines += ["", "![parameters by component](params.png)", "", "| component | total | active |", "|---|---:|---:|"]
        lines += [f"| {k} | {_b(v.total)} | {_b(v.active)} |" for k, v in s.components.items()]
        lines += ["", "| layer kind | count | params/layer | active/layer |", "|---|---:|---:|---:|"]
        lines += [f"| {k.name} | {k.count} | {_b(k.params_total)} | {_b(k.params_active)} |" for k in s.layer_kinds]
        counts, optimizer = cov.counts, self.inventory.in_phase("optimizer")
        lines += [
            "",
            f"## Operators on `{cov.platform}` ({cov.method})",
            "",
            f"{len(self.inventory.ops)} aten operators in one training step (forward, backward, optimizer) at "
            f"{self.inventory.compute_dtype}, {len(optimizer)} of them in the optimizer step "
            f"(clipping and AdamW at {MASTER_DTYPE}): " + ", ".join(f"{v} {k}" for k, v in counts.items()),
            "",
        ]
        if cov.method == "library":
            lines += ["Library read from (provenance):", ""]
            lines += [f"- {f.describe()}, file sha256 {f.file_sha256[:12]}" for f in cov.files]
            lines += [f"- note: {n}" for n in cov.notes]
            lines.append("")
        proven = sum(1 for o in cov.ops if o.dtypes_proven)
        lines += [
            f"Dtypes are proven, never guessed: {proven} ops have a needed dtype proven (stated by a source, an "
            f"override or run by the probe); {cov.dtypes_unknown} ops available by {cov.method} have dtypes "
            "nothing proves yet (step 2 runs them).",
            "",
        ]
        gaps = [o for o in cov.ops if o.status in ("missing", "dtype_unsupported")]
        if gaps:
            lines += ["| operator | status | dtypes | used in | why |", "|---|---|---|---|---|"]
            lines += [
                f"| `{o.op}` | {o.status} | {', '.join(o.dtypes_unsupported or o.dtypes_needed)} | "
                f"{', '.join(o.modules)} | {o.detail} |"
                for o in gaps
            ]
        if self.inventory.kept_whole:
            lines.append(
                "- recorded whole, as the device runs them (not as their decomposition): "
                + ", ".join(f"`{op}`" for op in self.inventory.kept_whole)
            )
        for c in self.inventory.constraints:
            lines.append(f"- constraint: `{c.op}` rejects {c.dtype} ({c.message}); captured at {c.ran_at}")
        if self.release:
            lines += ["", "## The release's files", "", *self.release.report_lines()]
        return "\n".join(lines) + "\n"

    def judge(self) -> Judgement:
        s, counts = self.structure, self.coverage.counts
        gaps = counts.get("missing", 0) + counts.get("dtype_unsupported", 0)
        headline = {
            "parameters": f"{_b(s.params_total)} total, {_b(s.params_active)} active",
            "operators": f"{len(self.inventory.ops)} captured ({len(self.inventory.in_phase('optimizer'))} "
            f"in the optimizer step), {gaps} not in the platform library, {self.coverage.dtypes_unknown} "
            "with dtypes unproven",
            "library": self.coverage.sources or f"{self.coverage.method} of {self.coverage.platform}",
        }
        unproven = (
            [
                f"probe ran no kernel (no device): the dtypes of {self.coverage.dtypes_unknown} operators on "
                f"{self.coverage.platform} are unproven"
            ]
            if self.coverage.ran_no_kernel
            else []
        )
        if self.release:
            headline["release files"] = self.release.headline()
            if self.release.problems:
                return Judgement(verdict="fail", headline=headline, reasons=self.release.problems, unproven=unproven)
        if gaps:
            return Judgement(
                verdict="warn",
                headline=headline,
                reasons=[
                    f"{gaps} of {len(self.inventory.ops)} operators are not in {self.coverage.platform}'s library "
                    f"({self.coverage.method}): step 2 adapts them"
                ],
                unproven=unproven,
            )
        return Judgement(verdict="pass", headline=headline, unproven=unproven)


def _b(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.2f}M"
