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


def main(names: list[str]) -> int:
    results: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                     "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "benchmarks": {}}
    failed = False
    for name in names or ALL:
        print(f"== bench {name}", flush=True)
        start = time.perf_counter()
        try:
            out = importlib.import_module(f"benchmarks.bench_{name}").run()
            results["benchmarks"][name] = {"seconds": round(time.perf_counter() - start, 1), "results": out}
        except Exception:
            failed = True
            results["benchmarks"][name] = {"error": traceback.format_exc()}
            print(traceback.format_exc(), file=sys.stderr)
        print(json.dumps(results["benchmarks"][name], indent=2)[:4000], flush=True)
    tmp = HERE / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(HERE / "results.json")
    print(f"wrote {HERE / 'results.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
