"""Concepts every step shares, defined once (like torchtitan's `components/`): the step result and
its verdict, the op-call notation, dtypes and tolerances, loss-curve distance, typing aliases.

Contract: the bottom of `day0`: `day0.core` imports nothing else of day0, so any module may import it
without a cycle.
"""
