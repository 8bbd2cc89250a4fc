"""`day0 calibrate`: measure a platform for the cost model and store its profile.

    day0 calibrate cpu                                   # 2 Ray workers, gloo; < 2 min on a laptop CPU
    day0 calibrate h100 --workers 8 --store s3://bucket/day0 --json

Writes `calibration/<platform>/profile.json` to the store (default `file://.day0`, the specs' default);
`day0 plan` and step 3 use it for specs on that platform and store. Prints calibrated figures beside the
datasheet's. Before measuring it refuses, in one line: a platform that does not load and, on a local
Ray (no `--address`), more `--workers` than this machine has CPUs for (each worker takes one; exit
2); a store that does not answer or cannot be written (exit 1, as `day0 run` does). It asks Ray for
the platform file's resource (`platform.resource`: `GPU` for nvidia.com/gpu, else a custom resource such
as `Ascend910`, which a local Ray advertises for the devices this host's torch counts), says each stage
on stderr, and without the devices ends within seconds, measuring nothing (exit 1, one line).
Exit codes: 0 measured and stored; 1 a failure while measuring or an unusable store; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import os

from cli._console import err, escape
from cli.preflight import check_store_answers, positive_int
from day0.errors import UsageError

__all__ = ["add_calibrate_command", "check_workers", "cmd_calibrate", "local_cpus"]


def add_calibrate_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help="measure a platform (GEMM, memory, collectives) for the planner")
    p.add_argument("platform", help="configs/platforms name or platform YAML")
    p.add_argument("--workers", type=positive_int, default=2, help="Ray workers for the collectives (default 2)")
    p.add_argument("--store", default="file://.day0", help="artifact store URI (default file://.day0)")
    p.add_argument("--address", default=None, help="Ray address (default: a local Ray)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from cli.reaper import start_reaper

    start_reaper()  # before Ray starts anything: it dies with this process, also on kill -9
    from day0.calibration import CalibrationError, calibrate
    from day0.spec.pipeline import load_platform
    from day0.store import open_store

    platform = load_platform(args.platform)
    check_workers(args.workers, args.address)
    check_store_answers(args.store)  # before measuring: minutes of work must have somewhere to go
    try:
        report = calibrate(platform, args.workers, open_store(args.store), address=args.address, progress=_say)
    except CalibrationError as exc:  # no device, or a wait that did not end: a failure, not a bug
        err().print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return 1
    print(report.profile.model_dump_json(indent=1) if args.json else report.to_markdown())
    return 0


def _say(stage: str) -> None:
    err().print(f"calibrate: {escape(stage)}", highlight=False)


def local_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def check_workers(workers: int, address: str | None) -> None:
    """On a local Ray each calibration worker takes a CPU, and all must run at once: more workers
    than CPUs would wait for placement until the timeout. A cluster (`address`) says for itself."""
    cpus = local_cpus()
    if address is None and workers > cpus:
        raise UsageError(
            f"--workers {workers}: this machine has {cpus} CPU(s) and each calibration worker of a local Ray "
            f"takes one; use --workers {cpus} or fewer, or --address of a Ray cluster with more"
        )
