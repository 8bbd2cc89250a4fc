"""The `day0` command line: the outermost layer (cli -> flows -> tasks -> day0).

    day0 validate configs/pipelines/tiny-local.yaml [--only analyze,parallel] [--check-store]
    day0 run configs/pipelines/tiny-local.yaml [--only analyze,parallel] [--fresh] [--json]
    day0 analyze deepseek-v3 [--platform ascend-910b] [--dtype bf16] [--json]
    day0 plan configs/pipelines/deepseek-v3-on-npu.yaml [--json]
    day0 fetch-library [torch-npu==2.14.0 ...]             # cache vendor wheels, snapshot their op registries
    day0 schema > day0-spec.schema.json

    day0 --debug run ...                                 # tracebacks of unexpected errors

`validate` and `run` make the same checks before anything starts (`cli.preflight.preflight`), so
validate refuses what run would, with the same message and exit code; run also checks that the
store answers, which validate does with `--check-store` (without it, validate stays offline).

Exit codes: 0 success (every requested step passed; warnings allowed), 1 a failed step or a failure
while running (an unreachable store, the same spec already running, an unexpected error: one line,
the traceback only with --debug), 2 bad input (spec, model, arguments). Input files are bounded by
`DAY0_LIMITS_*` (`day0.settings.LimitsSettings`). Whatever `run` starts dies with it (`cli.reaper`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

import day0
from cli._console import err, escape, out
from cli.preflight import preflight
from day0.errors import Day0Error, RunFailed, UsageError, shorten
from day0.spec.pipeline import STEPS, PipelineSpec, load_platform, load_yaml

__all__ = ["main"]


@contextmanager
def progress(title: str) -> Iterator[Callable[[str], None]]:
    """A spinner with elapsed time on stderr; yields a callback that names the current stage."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err(), transient=True
    ) as bar:
        task = bar.add_task(escape(title), total=None)  # names from the user are text, not markup
        yield lambda stage: bar.update(task, description=escape(f"{title}: {stage}"))


def cmd_validate(args: argparse.Namespace) -> int:
    from day0.runs.context import RunContext

    spec, _ = preflight(args.spec, args.only, check_store=args.check_store)
    run = RunContext.create(spec)
    store = "" if args.check_store else " (store not contacted: --check-store checks it, as run does)"
    out().print(
        f"[green]ok[/]: {escape(args.spec)} is a valid {spec.kind}; results go to "
        f"{escape(spec.storage)}/{run.prefix}{store}"
    )
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(PipelineSpec.model_json_schema(), indent=2))
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from rich.table import Table

    from day0.spec.pipeline import ModelSpec
    from day0.steps.analyze.run import analyze_model

    platform = load_platform(args.platform, "--platform")
    try:
        model = ModelSpec(source=args.model)
    except ValidationError as exc:
        raise UsageError(f"model: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    with progress(f"analyze {args.model}") as say:
        result = analyze_model(model, platform, args.dtype, progress=say)
    if args.json:
        print(result.model_dump_json(indent=2))
        return 0
    s = result.structure
    table = Table(title=escape(f"{s.model} ({s.architecture})"), show_header=True)
    for col in ("component", "total", "active"):
        table.add_column(col, justify="right" if col != "component" else "left")
    for name, c in s.components.items():
        table.add_row(name, f"{c.total / 1e9:.3f}B", f"{c.active / 1e9:.3f}B")
    table.add_row("[bold]all[/]", f"[bold]{s.params_total / 1e9:.3f}B", f"[bold]{s.params_active / 1e9:.3f}B")
    out().print(table)
    out().print(
        f"attention {s.attention_kind}; layers {', '.join(f'{k.count}x {k.name}' for k in s.layer_kinds)}; "
        f"KV cache {s.kv_cache_bytes_per_token['bf16'] / 1024:.1f} KiB/token at bf16"
    )
    cov = result.coverage
    optimizer = len(result.inventory.in_phase("optimizer"))
    out().print(
        f"operators: {len(result.inventory.ops)} captured ({optimizer} in the optimizer step); "
        f"on {cov.platform} ({cov.method}): {cov.counts}; {cov.dtypes_unknown} available with dtypes unproven"
    )
    for f in cov.files:
        out().print(f"  [dim]read {escape(f.describe())}[/]")
    for note in cov.notes:
        out().print(f"  [dim]note: {escape(note)}[/]")
    for o in cov.ops:
        if o.status in ("missing", "dtype_unsupported"):
            out().print(
                f"  [yellow]{o.status}[/] {escape(f'{o.op} {o.dtypes_unsupported or o.dtypes_needed}')} in "
                f"{escape(', '.join(o.modules))}" + (f" ({escape(o.detail)})" if o.detail else "")
            )
    if result.release:
        out().print(f"release files: {escape(result.release.headline())}")
        for line in result.release.report_lines()[1:]:
            out().print(f"  {escape(line.removeprefix('- '))}")
    out().print(f"[dim]{result.seconds:.1f} s[/]")
    return 0


# Seen on a loaded 2-core machine: the ephemeral Prefect server missed its 20 s default start timeout.
_PREFECT_STARTUP = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
_PREFECT_STARTUP_DEFAULT = "120"


def _run_flow(spec_path: str, only: list[str] | None, fresh: bool) -> dict:
    from cli.reaper import start_reaper

    start_reaper()  # before Prefect or Ray start anything: they die with this process
    from flows.adapt import adapt

    try:
        return adapt(spec=load_yaml(Path(spec_path)), only=only, fresh=fresh)
    except RuntimeError as exc:
        if "ephemeral Prefect API server" not in str(exc):
            raise
        raise _PrefectUnavailable(
            f"the temporary Prefect server did not start within {os.environ[_PREFECT_STARTUP]} s ({exc}); "
            f"raise {_PREFECT_STARTUP}, or point PREFECT_API_URL at a running server"
        ) from None


class _PrefectUnavailable(Exception):
    pass


def cmd_run(args: argparse.Namespace) -> int:
    # Every refusal before Prefect starts, and the same as `day0 validate --check-store` makes.
    spec, only = preflight(args.spec, args.only, check_store=True)
    os.environ.setdefault(_PREFECT_STARTUP, _PREFECT_STARTUP_DEFAULT)  # before Prefect reads its settings
    from prefect.exceptions import CancelledRun

    from day0.runs.context import RunContext, RunSummary
    from day0.runs.lock import hold_run

    try:
        with hold_run(RunContext.create(spec)):  # a second run of this spec refuses (exit 1)
            raw = _run_flow(args.spec, only, args.fresh)
    except RunFailed as exc:
        raw = exc.summary
    except _PrefectUnavailable as exc:
        err().print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return 1
    except CancelledRun as exc:  # the flow run ends Cancelled (flows/adapt.py): stopped, as by Ctrl-C
        err().print(f"[yellow]stopped[/]: {escape(str(exc))}", highlight=False)
        return 130
    summary = RunSummary.model_validate(raw)
    if args.json:
        print(summary.model_dump_json(indent=2))
    for step, reasons in summary.failed.items():
        err().print(f"[red]FAIL[/] {step}: {escape('; '.join(reasons[:3]))}", highlight=False)
    done = "[red]failed[/]" if summary.failed else "[green]done[/]"
    err().print(f"{done}: executed {summary.executed or 'none'}, reused {summary.reused or 'none'}", highlight=False)
    verdict = summary.overall_verdict().upper()
    err().print(  # the last line: the scorecard's verdict and where the report is
        f"verdict [{_COLOUR[verdict]}]{verdict}[/]; report: {escape(summary.report['html'])}", highlight=False
    )
    return 1 if summary.failed else 0


_COLOUR = {"PASS": "green", "WARN": "yellow", "FAIL": "red", "SKIPPED": "yellow"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="day0", description="Day-0 adaptation of large models, with proof.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    parser.add_argument("--version", action="version", version=f"day0 {day0.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    # `brief=True`: a command that ends in seconds and keeps most of what it builds runs with the garbage
    # collector off, its few cycles freed with the process (analyze: about 10% faster, the collections
    # scanning torch's and transformers' imports, for 14 MB more of 3.1 GB on Kimi K2); a long one collects.
    p = sub.add_parser("validate", help="validate a pipeline spec, listing every error")
    p.add_argument("spec")
    p.add_argument("--only", help="the steps `run --only` would get: checked as run checks them")
    p.add_argument(
        "--check-store", action="store_true", help="also check that the artifact store answers (run always does)"
    )
    p.set_defaults(func=cmd_validate, brief=True)
    p = sub.add_parser("run", help="run a pipeline spec (resumes completed steps)")
    p.add_argument("spec")
    p.add_argument("--only", help=f"comma-separated steps out of {','.join(STEPS)}")
    p.add_argument("--fresh", action="store_true", help="recompute every step instead of reusing stored results")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("analyze", help="step 1 on a model alone: structure, operators, coverage")
    p.add_argument("model", help="configs/models name, local dir with config.json, or hf://org/name[@rev]")
    p.add_argument("--platform", default="cpu", help="configs/platforms name or a platform YAML file")
    p.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"], help="compute dtype")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.set_defaults(func=cmd_analyze, brief=True)
    p = sub.add_parser("schema", help="print the spec's JSON Schema (for editors)")
    p.set_defaults(func=cmd_schema, brief=True)
    for extension in _extensions():
        extension(sub)
    return parser


def _extensions() -> list[Callable[[argparse._SubParsersAction], None]]:
    """Subcommands that live beside their step's code."""
    from cli.calibrate import add_calibrate_command
    from cli.library import add_fetch_library_command
    from cli.plan import add_plan_command
    from cli.webhook import add_webhook_command

    return [add_calibrate_command, add_fetch_library_command, add_plan_command, add_webhook_command]


_signalled: list[int] = []


def _terminate(signum: int, frame: object) -> None:
    # Prefect cancellation and `kill` send SIGTERM: raise so `finally` blocks (cluster teardown) run.
    _signalled.append(signum)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None:  # the process is this command, not a caller (tests): the modules, classes and validators
        gc.freeze()  # its imports built live as long as it, so no collection (nor the one at exit) scans them again
        if not getattr(args, "brief", False):
            gc.enable()  # off since cli.run; a brief command leaves it off (see build_parser)
    code = _dispatch(args)
    if _signalled and code != 130:  # the interrupt surfaced as another error (raised inside Ray's Cython code)
        err().print("[red]interrupted[/]")
        return 130
    return code


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return args.func(args)
    except Day0Error as exc:
        err().print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err().print("[red]interrupted[/]")
        return 130
    except Exception as exc:  # a bug, not bad input: one line unless --debug
        if args.debug:
            raise
        # what raised under it (torch's "Failed to load the backend extension: X" hides X's own error)
        cause = exc.__cause__
        under = f", from {type(cause).__name__}: {shorten(str(cause), 300)}" if cause else ""
        err().print(
            f"[red]internal error[/]: {escape(type(exc).__name__)}: {escape(shorten(str(exc), 300) + under)} "
            "(rerun with --debug for the traceback)",
            highlight=False,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
