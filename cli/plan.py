"""`day0 plan`: steps 3-4 from a spec, without running the pipeline.

    day0 plan configs/pipelines/deepseek-v3-on-npu.yaml     # top plans as a table; the YAML to the store
    day0 plan SPEC --top 20 --out plan.yaml [--force]       # the YAML to a file instead
    day0 plan SPEC --json                                   # every ranked plan as JSON on stdout

The chosen plan is step 4's (step 3's best with its memory/communication techniques), printed and
written with its Megatron-LM arguments and torchtitan config ("frameworks" with `--json`), after step
4's cumulative sequence (each row the plan after one more technique: the changes add up), the
elastic pool's minimum and maximum, and what to do next. Knobs the spec pins (`parallel:`, a written
`training.micro_batch`) are kept; a fully pinned spec is evaluated as it stands. It is written
to `plan.yaml` in the spec's run folder in its store (`<storage>/runs/<name>/<run-id>/`, beside what
`day0 run` of the spec writes), or to `--out FILE`; the path is printed (with `--json`, under
"written"), and "chosen" carries the same plan. Every plan file starts with a `# day0 plan` line: an
earlier plan is replaced with a notice on stderr (edit the spec, plan again); any other existing
file is refused unless `--force`.

The model's structure comes from step 1's result or the structure cache in the spec's store when
known (then neither torch nor transformers is imported), else it is built once on the meta device
and cached. A calibrated profile of the platform in the store (`day0 calibrate PLATFORM`) replaces
the datasheet figures unless `planner.profile: datasheet`. When the store does not answer, `--out`
still plans, with a notice, without the structure cache and the profile; without `--out` that is
exit 1 (the plan has nowhere to go).

Exit codes: 0 with a plan or with an infeasibility report; 2 for a bad spec, model or --out; 1 for
an unreachable store without --out (raised as Day0Error).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import day0
from cli.preflight import positive_int
from day0.errors import StoreUnavailable, UsageError
from day0.model.source import ResolvedModel, resolve_model
from day0.model.structure import ModelStructure
from day0.runs.folder import run_folder, run_id
from day0.spec.checks import check_parallel
from day0.spec.pipeline import PipelineSpec, load_spec
from day0.store import ArtifactStore, open_store, write_atomically
from day0.yamlio import safe_load

__all__ = [
    "PLAN_FILE",
    "add_plan_command",
    "build_structure",
    "cached_structure",
    "cmd_plan",
    "remember_structure",
    "structure_cache_key",
]

PLAN_FILE = "plan.yaml"  # in the spec's run folder, where `day0 plan` writes without --out
_HEADER = b"# day0 plan"


_COUNTERS = ("day0.model.structure", "day0.model.build")  # the code that counts a structure


def structure_cache_key(resolved: ResolvedModel) -> str:
    """Store key of a model's structure: a digest of its config.json. The entry records the code that
    counted it (`_from_cache`): a fix to the structure analysis recounts; the version alone would not."""
    blob = json.dumps(resolved.config, sort_keys=True, default=str).encode()
    return f"structures/{hashlib.sha256(blob).hexdigest()[:16]}.json"


def _code_digest() -> str:
    """`day0.provenance`'s digest of the counting code's sources (parses them for their imports)."""
    from day0.provenance import code_digest

    return "".join(code_digest(m) for m in _COUNTERS)


def _code_stamp() -> dict[str, list[int]]:
    """(modification time ns, size) of every source file the digest covers."""
    from day0.provenance import module_sources

    files = sorted({p for m in _COUNTERS for p in module_sources(m)})
    return {str(p): [st.st_mtime_ns, st.st_size] for p in files for st in [p.stat()]}


def _stamp_holds(stamp: object) -> bool:
    """Whether every file the stamp lists is unchanged (then the recorded digest still holds: no parse)."""
    if not isinstance(stamp, dict) or not stamp:
        return False
    for path, recorded in stamp.items():
        try:
            st = Path(path).stat()
        except OSError:
            return False
        if [st.st_mtime_ns, st.st_size] != recorded:
            return False
    return True


def _from_cache(entry: object) -> ModelStructure | None:
    """The cached structure when the code that counted it is the code here: its files unchanged by
    time and size, else (moved, touched) the same digest; None to recount."""
    if not isinstance(entry, dict) or not isinstance(entry.get("code"), dict) or "structure" not in entry:
        return None  # an entry from before the code was recorded with it
    code = entry["code"]
    if not (_stamp_holds(code.get("files")) or code.get("digest") == _code_digest()):
        return None
    return ModelStructure.model_validate(entry["structure"])


def cached_structure(store: ArtifactStore, spec: PipelineSpec) -> tuple[ModelStructure | None, ResolvedModel]:
    """(the spec's model structure from step 1's result for this spec or the structure cache, or None;
    the resolved model). Reads JSON only: neither torch nor transformers is imported."""
    resolved = resolve_model(spec.model)
    step1 = f"{run_folder(spec, run_id(spec))}/analyze/result.json"
    if store.exists(step1):
        return ModelStructure.model_validate(store.get_json(step1)["structure"]), resolved
    key = structure_cache_key(resolved)
    if store.exists(key):
        return _from_cache(store.get_json(key)), resolved
    return None, resolved


def build_structure(resolved: ResolvedModel) -> ModelStructure:
    """Step 1's structure analysis alone (the meta-device build, no operator capture)."""
    from day0.model.build import build_meta_model, load_hf_config
    from day0.model.structure import analyze_structure

    meta = build_meta_model(load_hf_config(resolved), resolved.source, trust_remote_code=resolved.trust_remote_code)
    return analyze_structure(meta, resolved.source)


def remember_structure(store: ArtifactStore, resolved: ResolvedModel, structure: ModelStructure) -> None:
    entry = {"code": {"digest": _code_digest(), "files": _code_stamp()}, "structure": structure.model_dump(mode="json")}
    store.put_json(structure_cache_key(resolved), entry)


def _own_file(path: Path) -> bool:
    """Whether `path` is a plan `day0 plan` wrote (it starts with the header every plan file gets)."""
    try:
        with path.open("rb") as fh:
            return fh.read(len(_HEADER)) == _HEADER
    except OSError:
        return False


def _check_target(out: Path, force: bool) -> str | None:
    """Refuse, before any work, an --out that cannot or should not be written; else the notice to
    give when it replaces a file (None when there is nothing to replace)."""
    if not out.parent.is_dir():
        raise UsageError(f"--out: directory {out.parent} does not exist")
    if out.is_dir():
        raise UsageError(f"--out: {out} is a directory; expected a file path")
    if not out.exists():
        return None
    if _own_file(out):
        return f"replacing {out} (an earlier day0 plan)"
    if not force:
        raise UsageError(f"--out: {out} exists and is not a plan day0 plan wrote; pass --force to overwrite it")
    return f"overwriting {out} (--force)"


def _notice(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


def _open_store(spec: PipelineSpec, out: Path | None) -> ArtifactStore | None:
    """The spec's store, or None (with a notice) when it does not answer and the plan goes to --out:
    the plan is then made without the store's structure cache and calibrated profile."""
    store = open_store(spec.storage)
    try:
        store.check()
    except StoreUnavailable as exc:
        if out is None:
            raise StoreUnavailable(f"{exc}; day0 plan writes the plan there unless --out FILE is given") from None
        _notice(f"{exc}; planning without its structure cache or calibrated profile")
        return None
    return store


def add_plan_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("plan", help="steps 3-4: rank parallel plans for a spec's model and cluster")
    p.add_argument("spec", help="pipeline spec YAML")
    p.add_argument("--json", action="store_true", help="print all ranked plans and the chosen plan as JSON")
    p.add_argument("--top", type=positive_int, default=10, help="plans shown in the table (default 10)")
    p.add_argument("--force", action="store_true", help="overwrite an --out file that day0 plan did not write")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write the chosen plan YAML (default: plan.yaml in the spec's run folder in its store); "
        "an earlier plan there is replaced",
    )
    p.set_defaults(func=cmd_plan, brief=True)


def cmd_plan(args: argparse.Namespace) -> int:
    from day0.planner.profile import load_profile
    from day0.steps.optimize.plan import optimize_for_spec
    from day0.steps.parallel.plan import plan_for_spec

    spec = load_spec(args.spec)
    out: Path | None = args.out
    replacing = _check_target(out, args.force) if out else None
    store = _open_store(spec, out)
    if store is not None:
        structure, resolved = cached_structure(store, spec)
    else:
        structure, resolved = None, resolve_model(spec.model)
    check_parallel(spec, resolved.config, args.spec)  # as `day0 validate` does: contradicting pins exit 2
    if structure is None:
        structure = build_structure(resolved)
        if store is not None:
            remember_structure(store, resolved, structure)
    report = plan_for_spec(spec, structure, load_profile(store, spec.platform.name) if store else None)
    optimized = optimize_for_spec(spec, structure, report)
    text = _header(spec, args.spec) + (optimized.to_yaml() if optimized.plan else report.to_yaml())
    if out:
        if replacing:
            _notice(replacing)
        try:
            write_atomically(out, text.encode(), replace=replacing is not None)
        except FileExistsError:
            raise UsageError(f"--out: {out} appeared while planning; pass --force to overwrite it") from None
        where = str(out)
    else:
        assert store is not None  # an unreachable store without --out was refused above
        key = f"{run_folder(spec, run_id(spec))}/{PLAN_FILE}"
        if store.exists(key):
            _notice(f"replacing the earlier plan at {store.url(key)}")
        where = store.put_text(key, text, "application/yaml")
    if args.json:
        frameworks = optimized.frameworks.model_dump(mode="json") if optimized.frameworks else None
        doc = {
            **report.model_dump(mode="json"),
            "chosen": safe_load(text),
            "step4": optimized.model_dump(
                mode="json", include={"sequence", "techniques", "step_before_s", "step_after_s"}
            ),
            "frameworks": frameworks,
            "written": where,
        }
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return 0
    print(report.to_markdown(top=args.top, images=False))
    if optimized.plan:
        print(optimized.to_markdown())
    print(f"plan written to {where}")
    return 0


def _header(spec: PipelineSpec, path: str) -> str:
    """The first line of every plan file: it names the spec, and marks the file as one `day0 plan`
    may replace."""
    return f"{_HEADER.decode()}: {spec.metadata.name} from {path} (day0 {day0.__version__})\n"
