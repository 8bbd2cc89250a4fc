"""day0: Day-0 adaptation of large models to compute platforms.

The domain library: importable without Prefect. `flows -> tasks -> day0`, never backwards.
"""

__version__ = "0.1.0"
