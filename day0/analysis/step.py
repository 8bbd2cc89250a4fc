"""Step 1, analyze: what is this model, which operators does it run, which does the platform lack?

`analyze_model(model_spec, platform, compute_dtype)` -> `AnalyzeResult` (structure + operator
inventory + coverage diff). Pure of side effects except reading the model source.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import BaseModel

from day0.analysis.coverage import CoverageReport, diff_declared, probe_device
from day0.analysis.inventory import OpInventory, capture_operators
from day0.analysis.source import remote_code_allowed, resolve_model_source
from day0.analysis.structure import ModelStructure, analyze_structure, build_meta_model, load_hf_config
from day0.spec import ModelSpec, PlatformSpec

__all__ = ["AnalyzeResult", "analyze_model"]

Progress = Callable[[str], None]


class AnalyzeResult(BaseModel):
    structure: ModelStructure
    inventory: OpInventory
    coverage: CoverageReport
    seconds: float

    def files(self) -> dict[str, bytes]:
        from day0.plots import grouped_bars

        comps = self.structure.components
        return {"params.png": grouped_bars(
            f"{self.structure.model}: parameters by component", list(comps),
            {"total": [c.total / 1e9 for c in comps.values()], "active per token": [c.active / 1e9 for c in comps.values()]},
            "billions", log=True)}

    def to_markdown(self) -> str:
        s, cov = self.structure, self.coverage
        lines = [
            f"# Step 1: analyze `{s.model}`", "",
            f"- architecture: `{s.architecture}` ({s.model_type}), {s.num_layers} layers, hidden {s.hidden_size}, "
            f"vocab {s.vocab_size}, max context {s.max_context}",
            f"- parameters: **{_b(s.params_total)} total**, **{_b(s.params_active)} active per token**",
            f"- attention: {s.attention_kind}, {s.num_attention_heads} heads, {s.num_kv_heads} KV heads, "
            f"head dim {s.head_dim}",
        ]
        if s.moe:
            lines.append(f"- MoE: {s.moe.num_experts} routed experts, top-{s.moe.top_k}, "
                         f"{s.moe.num_shared_experts} shared; {s.moe.num_moe_layers} MoE / "
                         f"{s.moe.num_dense_layers} dense layers")
        lines.append(f"- KV cache per token: {s.kv_cache_bytes_per_token['bf16'] / 1024:.1f} KiB at bf16")
        lines += [f"- note: {n}" for n in s.notes]
        lines += ["", "![parameters by component](params.png)", "", "| component | total | active |", "|---|---:|---:|"]
        lines += [f"| {k} | {_b(v.total)} | {_b(v.active)} |" for k, v in s.components.items()]
        lines += ["", "| layer kind | count | params/layer | active/layer |", "|---|---:|---:|---:|"]
        lines += [f"| {k.name} | {k.count} | {_b(k.params_total)} | {_b(k.params_active)} |" for k in s.layer_kinds]
        counts = cov.counts
        lines += ["", f"## Operators on `{cov.platform}` ({cov.method})", "",
                  f"{len(self.inventory.ops)} aten operators in one forward+backward at "
                  f"{self.inventory.compute_dtype}: " + ", ".join(f"{v} {k}" for k, v in counts.items()), ""]
        gaps = [o for o in cov.ops if o.status in ("missing", "dtype_unsupported")]
        if gaps:
            lines += ["| operator | status | dtypes | used in |", "|---|---|---|---|"]
            lines += [f"| `{o.op}` | {o.status} | {', '.join(o.dtypes_unsupported or o.dtypes_needed)} | "
                      f"{', '.join(o.modules)} |" for o in gaps]
        for c in self.inventory.constraints:
            lines.append(f"- constraint: `{c.op}` rejects {c.dtype} ({c.message}); captured at {c.ran_at}")
        return "\n".join(lines) + "\n"


def _b(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.2f}M"


def analyze_model(model: ModelSpec, platform: PlatformSpec, compute_dtype: str = "bf16",
                  progress: Progress | None = None) -> AnalyzeResult:
    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    say(f"resolving {model.source}")
    resolved = resolve_model_source(model.source)
    trust = remote_code_allowed(model, resolved)
    hf_config = load_hf_config(resolved, trust_remote_code=trust)
    if compute_dtype == "fp8":
        compute_dtype = "bf16"  # fp8 training keeps bf16 activations; the matmul path is the platform's
    say("building the architecture on the meta device")
    meta = build_meta_model(hf_config, model.source, compute_dtype, trust_remote_code=trust)
    structure = analyze_structure(meta, model.source)
    say("capturing operators (forward + backward)")
    inventory = capture_operators(meta, structure.attention_kind, compute_dtype)
    say(f"diffing against {platform.name}'s operator library")
    if platform.operator_library == "probe":
        coverage = probe_device(inventory, platform.device_type, platform.name)
    else:
        coverage = diff_declared(inventory, platform.operator_library, platform.name)
    return AnalyzeResult(structure=structure, inventory=inventory, coverage=coverage,
                         seconds=time.perf_counter() - start)
