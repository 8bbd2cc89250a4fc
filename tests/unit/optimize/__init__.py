"""Step 4 (`day0.steps.optimize`) on its own, from a step 3 report."""
