"""Step 4, optimize: memory/communication techniques for step 3's best plan, each with its estimated
effect, from the shared cost model in `day0.planner`."""
