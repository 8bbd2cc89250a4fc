"""Checks of a valid spec against what it names: the model's config and the engines day0 can start.
`day0 validate` and `day0 run` make them before anything starts (`cli.preflight`).

Contract: each raises `SpecError` naming the spec field, the value and the bound, or returns None.
Cheap and pure: neither torch, transformers nor the serving code is imported.

- `check_context_lengths(spec, config, source)`: the context lengths the spec writes
  (`training.seq_len`, `trial.seq_len`, `inference.context_len`, the benchmark's longest request)
  are at most the model's `max_position_embeddings`, the positions it was trained for (raise it in
  the model's config, with its rope scaling, for a context-extension run). A length left at its
  default is not checked: the defaults are figures for a large model, not this model's.
- `check_engine(spec, steps)`: when step 6 is among `steps`, a named `inference.engine` is one day0
  can start (`day0.spec_serving.ENGINES`) on the platform's device type. `auto` is not refused here:
  it picks by platform, and a platform without a serving engine yet (an NPU) is step 6's to report.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from day0.errors import SpecError, SpecIssue
from day0.spec import PipelineSpec
from day0.spec_serving import ENGINES

__all__ = ["check_context_lengths", "check_engine"]


def _written(model: BaseModel, field: str) -> bool:
    return field in model.model_fields_set


def _lengths(spec: PipelineSpec) -> list[tuple[str, int]]:
    """(field, tokens) of every context length the spec writes itself."""
    out = []
    if _written(spec.training, "seq_len"):
        out.append(("training.seq_len", spec.training.seq_len))
    if _written(spec.trial, "seq_len"):
        out.append(("trial.seq_len", spec.trial.seq_len))
    if _written(spec.inference, "context_len"):
        out.append(("inference.context_len", spec.inference.context_len))
    bench = spec.inference.benchmark
    if _written(spec.inference, "benchmark") and {"input_len", "output_len"} & bench.model_fields_set:
        out.append(("inference.benchmark (input_len + output_len at range_ratio)", bench.longest_request()))
    return out


def check_context_lengths(spec: PipelineSpec, config: dict[str, Any], source: str) -> None:
    """Refuse a written context length beyond the model's positions (see the module contract)."""
    text = config.get("text_config")
    cfg: dict[str, Any] = text if isinstance(text, dict) else config
    positions = cfg.get("max_position_embeddings")
    if not isinstance(positions, int) or isinstance(positions, bool):
        return  # absent or malformed: the model config's own checks (day0.core.plausible) speak for it
    issues = [
        SpecIssue(field, f"{tokens:,} tokens is beyond the model's max_position_embeddings ({positions:,})")
        for field, tokens in _lengths(spec)
        if tokens > positions
    ]
    if issues:
        raise SpecError(source, issues)


def check_engine(spec: PipelineSpec, steps: Iterable[str], source: str) -> None:
    """Refuse a serving engine day0 cannot start here, when step 6 is to run."""
    if "inference" not in steps:
        return
    engine, device = spec.inference.engine, spec.platform.device_type
    if engine not in ENGINES:
        message = (
            f"{engine!r} is not wired into day0 yet (no CPU build, and its GPU launcher is not built); "
            f"expected one of {sorted(ENGINES)}"
        )
        raise SpecError(source, [SpecIssue("inference.engine", message)])
    if engine != "auto" and device not in ENGINES[engine]:
        message = f"{engine!r} serves on device types {list(ENGINES[engine])}, not {device!r} (platform.device_type)"
        raise SpecError(source, [SpecIssue("inference.engine", message)])
