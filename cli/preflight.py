"""Checks the CLI runs before anything starts: `validate` runs the same ones `run` runs, cheaply.

Contract: each raises a `Day0Error` with one message naming the input: `UsageError` (exit 2) for
arguments, `ModelError` (exit 2) for a model source that does not resolve offline or a config
outside the plausibility bounds, `StoreUnavailable` (exit 1: the URI is well-formed but the
store did not answer) when the store is checked and unreachable. Nothing here writes anything.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from day0.core.model_source import resolve_model
from day0.core.plausible import check_config
from day0.errors import UsageError
from day0.spec import STEPS, PipelineSpec, load_yaml
from day0.store import open_store

__all__ = ["PREFECT_MAX_PARAMETER_BYTES", "check_parameters", "check_spec", "parse_only", "positive_int"]

# Prefect's default PREFECT_SERVER_API_MAX_PARAMETER_SIZE: a flow run's parameters, JSON-serialised.
PREFECT_MAX_PARAMETER_BYTES = 524_288


def parse_only(value: str | None) -> list[str] | None:
    """`--only a,b` as a list; None when the option is absent; an empty selection is a usage error."""
    if value is None:
        return None
    steps = [s.strip() for s in value.split(",") if s.strip()]
    if not steps:
        raise UsageError(f"--only: empty selection; expected some of {list(STEPS)}")
    return steps


def positive_int(text: str) -> int:
    """argparse type for counts that must be at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text[:40]!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def check_parameters(path: str) -> None:
    """The spec, as the flow's parameter, fits Prefect's parameter size limit."""
    size = len(json.dumps(load_yaml(Path(path))))
    if size > PREFECT_MAX_PARAMETER_BYTES:
        raise UsageError(
            f"{path}: the spec is {size} bytes as JSON; Prefect takes flow parameters up to "
            f"{PREFECT_MAX_PARAMETER_BYTES} bytes (PREFECT_SERVER_API_MAX_PARAMETER_SIZE)"
        )


def check_spec(spec: PipelineSpec, check_store: bool) -> None:
    """The model source resolves (offline when the hub is) to a plausible config; with
    `check_store`, the store answers."""
    resolved = resolve_model(spec.model)
    check_config(spec.model.source, resolved.config)
    if check_store:
        open_store(spec.storage).check()
