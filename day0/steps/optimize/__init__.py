"""Step 4, optimize: memory/communication techniques for step 3's best plan, each with its estimated
effect. `run.py` runs the optimiser of `day0.planner`; `result.py` judges its choice and writes
optimized-plan.yaml."""
