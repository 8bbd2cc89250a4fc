"""Tests that need a real service (Prefect server, Ray cluster, S3 server) or run a whole model or the
CLI end to end: the `integration` marker (tests/conftest.py) holds for most of each file here."""
