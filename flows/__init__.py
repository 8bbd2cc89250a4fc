"""Prefect flows: composition, parameters and deployment entrypoints only."""
