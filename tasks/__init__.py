"""Prefect tasks, one module per adaptation step, thin over `day0`.

Every step task has the signature `task(ctx: RunContext, inputs: dict[str, BaseModel]) -> Result`
(inputs: results of the steps it depends on) and goes through `run_step`, which makes it resumable:
a completed step's stored result is returned instead of recomputing it.
"""
