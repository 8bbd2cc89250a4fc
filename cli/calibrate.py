"""`day0 calibrate`: measure a platform for the cost model and store its profile.

    day0 calibrate cpu                                   # 2 Ray workers, gloo; < 2 min on a laptop CPU
    day0 calibrate h100 --workers 8 --store s3://bucket/day0 --json

Writes `calibration/<platform>/profile.json` to the store (default `file://.day0`, the specs' default);
`day0 plan` and step 3 use it for specs on that platform and store. Prints calibrated figures beside the
datasheet's. Exit codes: 0 measured and stored; 1 a failure while measuring; 2 bad arguments.
"""

from __future__ import annotations

import argparse

from cli.preflight import positive_int

__all__ = ["add_calibrate_command", "cmd_calibrate"]


def add_calibrate_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help="measure a platform (GEMM, memory, collectives) for the planner")
    p.add_argument("platform", help="configs/platforms name or platform YAML")
    p.add_argument("--workers", type=positive_int, default=2, help="Ray workers for the collectives (default 2)")
    p.add_argument("--store", default="file://.day0", help="artifact store URI (default file://.day0)")
    p.add_argument("--address", default=None, help="Ray address (default: a local Ray)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from day0.calibration import calibrate
    from day0.spec import load_platform
    from day0.store import open_store

    platform = load_platform(args.platform)
    report = calibrate(platform, args.workers, open_store(args.store), address=args.address)
    print(report.profile.model_dump_json(indent=1) if args.json else report.to_markdown())
    return 0
