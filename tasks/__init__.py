"""Prefect tasks over `day0`: every registered step (`day0.steps.registry`) as a task of one shape
(`tasks.steps`), made resumable by `run_step` (`tasks._step`): a stored result computed by the same
code is returned instead of recomputing it.
"""
