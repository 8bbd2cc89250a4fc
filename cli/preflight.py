"""Checks the CLI runs before anything starts: `day0 run` and `day0 validate` call the one
`preflight`, so validate refuses exactly what run would refuse, with the same message and exit code.

    spec, only = preflight("spec.yaml", "--only text or None", check_store=True)   # day0 run
    spec, only = preflight("spec.yaml", None, check_store=False)                   # day0 validate

In order: the spec (every error, file and field path; every figure within its plausibility bound),
`--only` (a selection of known steps that leaves something to run), what the selected steps would
refuse of the spec as bad input (`day0.spec.checks.check_steps`: the checks the steps themselves make
when they run, so a run never gets minutes in to refuse what validate let through), the tolerance
policy step 2 is to judge by (msprobe's standards cached or snapshotted, when asked for), the backend's
preconditions (kuberay needs an s3:// store and a node pool), the model source (resolves, offline
when the hub is, to a plausible config, and the context lengths the spec writes fit the model's
positions, and the engine step 6 is to start loads it), the store answers
(`check_store`; run always checks it, validate with `--check-store`; a file:// store must be a
directory this process can write, or one it can create), the platform's operator library resolves
(each package known, its version cached, snapshotted or served, its wheel holding the registry), and
the spec fits Prefect's parameter size. Cheap: neither Prefect, Ray, torch nor transformers is imported.

Contract: each raises a `Day0Error` with one message naming the input: `UsageError`/`SpecError`
(exit 2) for arguments and the spec, `ModelError` (exit 2) for a model source that does not resolve
or a config outside the plausibility bounds, `StoreUnavailable` (exit 1: the URI is well-formed but
the store did not answer) when the store is checked and unreachable. Nothing here writes anything
but the wheel cache (a library package neither cached nor snapshotted is downloaded into it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from day0.errors import UsageError
from day0.model.plausible import check_config
from day0.model.source import resolve_model
from day0.spec.checks import check_context_lengths, check_parallel, check_serving, check_steps
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import STEPS, PipelineSpec, load_spec, load_yaml
from day0.steps.operators.plan import check_tolerance
from day0.store import open_store

__all__ = [
    "PREFECT_MAX_PARAMETER_BYTES",
    "check_library",
    "check_only",
    "check_parameters",
    "check_spec",
    "check_store_answers",
    "parse_only",
    "positive_int",
    "preflight",
]

# Prefect's default PREFECT_SERVER_API_MAX_PARAMETER_SIZE: a flow run's parameters, JSON-serialised.
PREFECT_MAX_PARAMETER_BYTES = 524_288


def preflight(path: str, only: str | None, check_store: bool) -> tuple[PipelineSpec, list[str] | None]:
    """Every check `day0 run` makes before it starts work; returns (the spec, the `--only` list)."""
    from day0.backends.session import check_backend  # here: `day0 plan` imports this module, not the backends

    spec = load_spec(path)
    selection = parse_only(only)
    check_only(spec, selection)
    check_steps(spec, [s for s in spec.steps if selection is None or s in selection], path)
    if "operators" in spec.steps:  # a prerequisite of later steps: checked whatever --only selects
        check_tolerance(spec.validation)
    check_backend(spec)
    check_spec(spec, check_store=check_store, source=path)
    check_library(spec.platform)
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


def check_library(platform: PlatformSpec) -> None:
    """The platform's operator library resolves as step 1 will resolve it: every package known, each
    version in the wheel cache, a committed snapshot or served by pip, each wheel holding its registry."""
    from day0.platforms.libraries.resolve import resolve_library

    if platform.operator_library != "probe":
        resolve_library(platform.operator_library)


def check_parameters(path: str) -> None:
    """The spec, as the flow's parameter, fits Prefect's parameter size limit."""
    size = len(json.dumps(load_yaml(Path(path))))
    if size > PREFECT_MAX_PARAMETER_BYTES:
        raise UsageError(
            f"{path}: the spec is {size} bytes as JSON; Prefect takes flow parameters up to "
            f"{PREFECT_MAX_PARAMETER_BYTES} bytes (PREFECT_SERVER_API_MAX_PARAMETER_SIZE)"
        )


def check_spec(spec: PipelineSpec, check_store: bool, source: str = "<spec>") -> None:
    """The model source resolves (offline when the hub is) to a plausible config that the spec's
    context lengths fit and its pinned parallel knobs agree with (`source`: the spec's file, named in
    errors); with `check_store`, the store answers."""
    resolved = resolve_model(spec.model)
    check_config(spec.model.source, resolved.config)
    check_context_lengths(spec, resolved.config, source)
    check_parallel(spec, resolved.config, source)
    check_serving(spec, resolved.config, source)
    if check_store:
        check_store_answers(spec.storage)


def check_store_answers(uri: str) -> None:
    """The store at `uri` answers (`StoreUnavailable`, exit 1, otherwise): an s3:// bucket is
    reachable; a file:// root is a directory this process can write, or the nearest folder that
    exists above it is one (so it can be created). `day0 run`, `validate --check-store` and
    `day0 calibrate` make this check before any work."""
    open_store(uri).check()
