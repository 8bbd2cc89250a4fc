"""Step 2, `day0.steps.operators`: per-op checks, adaptations, verdicts, its Ray job."""
