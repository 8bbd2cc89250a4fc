"""The run report (`day0.report`)."""
