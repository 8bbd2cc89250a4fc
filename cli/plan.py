"""`day0 plan`: steps 3-4 from a spec, without running the pipeline.

    day0 plan configs/pipelines/deepseek-v3-on-npu.yaml            # top plans as a table, writes the YAML
    day0 plan SPEC --top 20 --out plan.yaml [--force]              # an existing file needs --force
    day0 plan SPEC --json                                          # every ranked plan as JSON on stdout

Exit codes: 0 with a plan or with an infeasibility report; 2 for a bad spec or model (raised as Day0Error).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli.preflight import positive_int
from day0.errors import UsageError
from day0.spec import load_spec
from day0.store import write_atomically

__all__ = ["add_plan_command", "cmd_plan"]


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
    p.add_argument("--json", action="store_true", help="print all ranked plans as JSON")
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
    from day0.analysis.step import analyze_model
    from day0.planner.step import optimize_for_spec, plan_for_spec

    spec = load_spec(args.spec)
    out = args.out if args.out or args.json else Path(f"{spec.metadata.name}.plan.yaml")
    if out:
        _check_target(out, args.force)
    structure = analyze_model(spec.model, spec.platform, spec.training.precision.compute).structure
    report = plan_for_spec(spec, structure)
    optimized = optimize_for_spec(spec, structure, report)
    if out:
        text = optimized.to_yaml() if optimized.plan else report.to_yaml()
        try:
            write_atomically(out, text.encode(), replace=args.force)
        except FileExistsError:
            raise UsageError(f"--out: {out} appeared while planning; pass --force to overwrite it") from None
    if args.json:
        sys.stdout.write(report.model_dump_json(indent=1) + "\n")
        return 0
    print(report.to_markdown(top=args.top))
    if optimized.plan:
        print(optimized.to_markdown())
    if out:
        print(f"plan written to {out}")
    return 0
