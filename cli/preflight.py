"""Checks the CLI runs before anything starts: `day0 run` and `day0 validate` call the one
`preflight`, so validate refuses exactly what run would refuse, with the same message and exit code.

    spec, only = preflight("spec.yaml", "--only text or None", check_store=True)   # day0 run
    spec, only = preflight("spec.yaml", None, check_store=False)                   # day0 validate

In order: the spec (every error, file and field path), `--only` (a selection of known steps that
leaves something to run), the backend's preconditions (kuberay needs an s3:// store and a node
pool), the model source (resolves, offline when the hub is, to a plausible config), the store
answers (`check_store`; run always checks it, validate with `--check-store`), and the spec fits
Prefect's parameter size. Cheap: neither Prefect, Ray, torch nor transformers is imported.

Contract: each raises a `Day0Error` with one message naming the input: `UsageError`/`SpecError`
(exit 2) for arguments and the spec, `ModelError` (exit 2) for a model source that does not resolve
or a config outside the plausibility bounds, `StoreUnavailable` (exit 1: the URI is well-formed but
the store did not answer) when the store is checked and unreachable. Nothing here writes anything.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from day0.backends.session import check_backend
from day0.core.model_source import resolve_model
from day0.core.plausible import check_config
from day0.errors import UsageError
from day0.spec import STEPS, PipelineSpec, load_spec, load_yaml
from day0.store import open_store

__all__ = [
    "PREFECT_MAX_PARAMETER_BYTES",
    "check_only",
    "check_parameters",
    "check_spec",
    "parse_only",
    "positive_int",
    "preflight",
]

# Prefect's default PREFECT_SERVER_API_MAX_PARAMETER_SIZE: a flow run's parameters, JSON-serialised.
PREFECT_MAX_PARAMETER_BYTES = 524_288


def preflight(path: str, only: str | None, check_store: bool) -> tuple[PipelineSpec, list[str] | None]:
    """Every check `day0 run` makes before it starts work; returns (the spec, the `--only` list)."""
    spec = load_spec(path)
    selection = parse_only(only)
    check_only(spec, selection)
    check_backend(spec)
    check_spec(spec, check_store=check_store)
    check_parameters(path)
    return spec, selection


def parse_only(value: str | None) -> list[str] | None:
    """`--only a,b` as a list; None when the option is absent; an empty selection is a usage error."""
    if value is None:
        return None
    steps = [s.strip() for s in value.split(",") if s.strip()]
    if not steps:
        raise UsageError(f"--only: empty selection; expected some of {list(STEPS)}")
    return steps


def check_only(spec: PipelineSpec, only: list[str] | None) -> None:
    """`--only` names known steps and leaves something to run. The flow's `plan_steps` adds the
    prerequisites of what is selected, so its plan is empty exactly when this selection is."""
    if only and (unknown := [s for s in only if s not in STEPS]):
        raise UsageError(f"--only: unknown step(s) {unknown}; expected some of {list(STEPS)}")
    if not spec.steps:
        raise UsageError("steps: nothing to run: the spec lists no steps")
    if only and not any(s in only for s in spec.steps):
        raise UsageError(f"--only {','.join(only)}: nothing to run: none of the spec's steps {spec.steps}")


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
