"""Step 3, parallel: ranked TP/PP/EP/DP/CP plans for the spec's model on its cluster, from the shared
cost model in `day0.planner` (which `day0 plan` runs too)."""
