"""Concepts every step shares, defined once (like torchtitan's `components/`): the step result and
its verdict, the op-call notation, dtypes and tolerances, the resolved model source.

Contract: `day0.core` imports nothing from the step packages (`analysis`, `numerics`, `planner`,
`trial`), so any of them may import it without a cycle.
"""
