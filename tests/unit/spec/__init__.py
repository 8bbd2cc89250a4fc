"""The spec (`day0.spec`)."""
