"""Run every benchmark module and write benchmarks/results.json and benchmarks/results.md.

make bench                       # all
python -m benchmarks.run analyze planner   # some
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ALL = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in ALL]
    if unknown:  # before anything runs: a mistyped name must not be recorded as a failed benchmark
        print(
            f"usage: python -m benchmarks.run [NAME ...]; unknown {', '.join(unknown)}; one of: {' '.join(ALL)}",
            file=sys.stderr,
        )
        return 2
    out = HERE / "results.json"
    # Running a subset updates those entries and keeps the others (each entry carries its own date).
    results: dict = json.loads(out.read_text()) if out.exists() else {"benchmarks": {}}
    results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    failed = False
    for name in names or ALL:
        print(f"== bench {name}", flush=True)
        start = time.perf_counter()
        try:
            out_of_run = importlib.import_module(f"benchmarks.bench_{name}").run()
            results["benchmarks"][name] = {
                "date": _now(),
                "seconds": round(time.perf_counter() - start, 1),
                "results": out_of_run,
            }
        except Exception:  # noqa: BLE001 - one failing benchmark is recorded; the others still run
            failed = True
            results["benchmarks"][name] = {"date": _now(), "error": traceback.format_exc()}
            print(traceback.format_exc(), file=sys.stderr)
        print(json.dumps(results["benchmarks"][name], indent=2)[:4000], flush=True)
    tmp = HERE / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(out)
    print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
