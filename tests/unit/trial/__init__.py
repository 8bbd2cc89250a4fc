"""Step 5, `day0.steps.trial`."""
