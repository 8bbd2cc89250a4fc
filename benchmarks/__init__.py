"""Benchmarks: `make bench` runs each `bench_*.py` module's `run() -> dict` and writes
benchmarks/results.json (machine-readable) and benchmarks/results.md (summary)."""
