"""Detection power: the fault catalogue (tests/data/faults/catalogue.yaml) through every validation
layer, with clean runs over 3 seeds for the false-alarm rate (`testsupport.fault_matrix`).

    .venv/bin/python -m benchmarks.bench_faults

`run()` returns the matrix (one row per fault: expected layer, caught by, localised at, margin to
the threshold) and its Markdown table for benchmarks/run.py to collect.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

__all__ = ["run"]

REPO = Path(__file__).resolve().parent.parent  # on the path: the faulty kernels import as tests.fixtures.faulty_kernels
DATA = REPO / "tests" / "data"


def run() -> dict[str, Any]:
    from day0.spec.pipeline import load_yaml
    from testsupport.fault_matrix import Catalogue, install_plugins, run_matrix

    catalogue = Catalogue.model_validate(load_yaml(DATA / "faults" / "catalogue.yaml"))
    with tempfile.TemporaryDirectory() as site:
        install_plugins(catalogue.faults, Path(site), [DATA / "faults", REPO])
        matrix = run_matrix(catalogue.faults, progress=print)
    rows = []
    for r in matrix.rows + matrix.clean:
        d = r.detection(r.expected) if r.expected else None
        rows.append(
            {
                "fault": r.fault,
                "expected": r.expected or "none (clean)",
                "caught_by": r.caught_by,
                "localised_at": d.localised_at if d else None,
                "margin": None if d is None or d.margin is None else round(d.margin, 3),
                "detail": {x.layer: x.detail[:240] for x in r.detections},
            }
        )
    return {
        "faults": len(matrix.rows),
        "detection_rate": matrix.detection_rate,
        "clean_runs": len(matrix.clean),
        "false_alarms": matrix.false_alarms,
        "seconds": round(matrix.seconds, 1),
        "rows": rows,
        "table": matrix.table(),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
