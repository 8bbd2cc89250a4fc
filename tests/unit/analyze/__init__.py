"""Step 1, `day0.steps.analyze`: the operator inventory and the coverage diff."""
