"""`python -m benchmarks.run NAME ...`: a name that is no benchmark is a usage error, and nothing is written."""

from __future__ import annotations

import hashlib

from benchmarks import run
from tests.fixtures.paths import REPO


def test_an_unknown_benchmark_name_exits_2_and_leaves_the_results_untouched(capsys) -> None:  # type: ignore[no-untyped-def]
    results = REPO / "benchmarks" / "results.json"
    before = hashlib.sha256(results.read_bytes()).hexdigest()
    assert run.main(["planner", "--help"]) == 2
    assert "unknown --help" in capsys.readouterr().err
    assert hashlib.sha256(results.read_bytes()).hexdigest() == before
