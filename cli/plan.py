"""`day0 plan`: steps 3-4 from a spec, without running the pipeline.

    day0 plan configs/pipelines/deepseek-v3-on-npu.yaml            # top plans as a table, writes the YAML
    day0 plan SPEC --top 20 --out plan.yaml [--force]              # an existing file needs --force
    day0 plan SPEC --json                                          # every ranked plan as JSON on stdout

The chosen plan is step 4's (step 3's best with its memory/communication techniques); `--out` writes it
and `--json` carries the same under "chosen". The model's structure comes from step 1's result or the
structure cache in the spec's store when known (then neither torch nor transformers is imported), else
it is built once on the meta device and cached. A calibrated profile of the platform in the store
(`day0 calibrate PLATFORM`) replaces the datasheet figures unless `planner.profile: datasheet`.

Exit codes: 0 with a plan or with an infeasibility report; 2 for a bad spec or model (raised as Day0Error).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import day0
from cli.preflight import positive_int
from day0.analysis.structure import ModelStructure
from day0.core.model_source import ResolvedModel, resolve_model
from day0.errors import UsageError
from day0.spec import PipelineSpec, load_spec
from day0.store import ArtifactStore, open_store, write_atomically
from day0.yamlio import safe_load

__all__ = [
    "add_plan_command",
    "build_structure",
    "cached_structure",
    "cmd_plan",
    "remember_structure",
    "structure_cache_key",
]


def structure_cache_key(resolved: ResolvedModel) -> str:
    """Store key of a model's structure: a digest of its config.json and the day0 version that counted it."""
    blob = json.dumps(resolved.config, sort_keys=True, default=str).encode() + day0.__version__.encode()
    return f"structures/{hashlib.sha256(blob).hexdigest()[:16]}.json"


def cached_structure(store: ArtifactStore, spec: PipelineSpec) -> tuple[ModelStructure | None, ResolvedModel]:
    """(the spec's model structure from step 1's result for this spec or the structure cache, or None;
    the resolved model). Reads JSON only: neither torch nor transformers is imported."""
    from day0.runs import RunContext

    resolved = resolve_model(spec.model)
    step1 = RunContext.create(spec).key("analyze", "result.json")
    if store.exists(step1):
        return ModelStructure.model_validate(store.get_json(step1)["structure"]), resolved
    key = structure_cache_key(resolved)
    if store.exists(key):
        return ModelStructure.model_validate(store.get_json(key)), resolved
    return None, resolved


def build_structure(resolved: ResolvedModel) -> ModelStructure:
    """Step 1's structure analysis alone (the meta-device build, no operator capture)."""
    from day0.analysis.structure import analyze_structure
    from day0.core.modeling import build_meta_model, load_hf_config

    meta = build_meta_model(load_hf_config(resolved), resolved.source, trust_remote_code=resolved.trust_remote_code)
    return analyze_structure(meta, resolved.source)


def remember_structure(store: ArtifactStore, resolved: ResolvedModel, structure: ModelStructure) -> None:
    store.put_json(structure_cache_key(resolved), structure.model_dump(mode="json"))


def _check_target(out: Path, force: bool) -> None:
    """Refuse, before any work, an --out that cannot or should not be written."""
    if not out.parent.is_dir():
        raise UsageError(f"--out: directory {out.parent} does not exist")
    if out.is_dir():
        raise UsageError(f"--out: {out} is a directory; expected a file path")
    if out.exists() and not force:
        raise UsageError(f"--out: {out} exists; pass --force to overwrite it")


def add_plan_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("plan", help="steps 3-4: rank parallel plans for a spec's model and cluster")
    p.add_argument("spec", help="pipeline spec YAML")
    p.add_argument("--json", action="store_true", help="print all ranked plans and the chosen plan as JSON")
    p.add_argument("--top", type=positive_int, default=10, help="plans shown in the table (default 10)")
    p.add_argument("--force", action="store_true", help="overwrite the --out file if it exists")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write the chosen plan YAML (default: <metadata.name>.plan.yaml; with --json only if set)",
    )
    p.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from day0.planner.profile import load_profile
    from day0.planner.step import optimize_for_spec, plan_for_spec

    spec = load_spec(args.spec)
    out = args.out if args.out or args.json else Path(f"{spec.metadata.name}.plan.yaml")
    if out:
        _check_target(out, args.force)
    store = open_store(spec.storage)
    structure, resolved = cached_structure(store, spec)
    if structure is None:
        structure = build_structure(resolved)
        remember_structure(store, resolved, structure)
    report = plan_for_spec(spec, structure, load_profile(store, spec.platform.name))
    optimized = optimize_for_spec(spec, structure, report)
    text = optimized.to_yaml() if optimized.plan else report.to_yaml()
    if out:
        try:
            write_atomically(out, text.encode(), replace=args.force)
        except FileExistsError:
            raise UsageError(f"--out: {out} appeared while planning; pass --force to overwrite it") from None
    if args.json:
        doc = {**report.model_dump(mode="json"), "chosen": safe_load(text)}
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return 0
    print(report.to_markdown(top=args.top))
    if optimized.plan:
        print(optimized.to_markdown())
    if out:
        print(f"plan written to {out}")
    return 0
