"""Runs (`day0.runs`): the manifest, interrupted attempts."""
