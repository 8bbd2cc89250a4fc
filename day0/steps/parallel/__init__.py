"""Step 3, parallel: ranked TP/PP/EP/DP/CP plans for the spec's model on its cluster. `run.py` turns the
spec into the planner's inputs (`planner_inputs`) and runs the search of `day0.planner` (the cost model,
which `day0 plan` shares); `result.py` judges it; `text.py` writes it for people."""
