"""Prefect tasks, one module per adaptation step, thin over `day0`.

Every step task takes the run context and the typed results of the steps it reads, e.g.
`operators(ctx, analyzed: AnalyzeResult) -> OperatorsResult`, and goes through `run_step`, which
makes it resumable: a stored result computed by the same code is returned instead of recomputing
it. The flow reads a step's prerequisites from these signatures (`flows.adapt.prerequisites`).
"""
