"""Step 6, `day0.steps.inference`."""
