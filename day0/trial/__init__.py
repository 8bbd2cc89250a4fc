"""Step 5: small-scale trial training on Ray Train, loss-curve alignment, checkpoints and recovery.

Contracts: `run_trial(spec, checkpoint_uri=..., plan=...)` is the step's entry point and returns a
`TrialResult` (pydantic, `to_markdown()`, `files()` -> the loss overlay PNG). The alignment maths
(`alignment`) are pure; the loop (`loop`) runs per Ray Train worker and is deterministic; runs
(`run`) resume from their last checkpoint under the same (storage URI, name). `TrialFaults` is for
tests only. Modules import torch/ray lazily where they can; import this package's submodules directly
when only the maths are needed.
"""

from day0.trial.alignment import AlignmentReport, AlignmentThresholds, compare_curves
from day0.trial.loop import LoopConfig, TrialFaults
from day0.trial.results import TrialCurve, TrialResult
from day0.trial.step import TrialPlan, plan_from_results, run_trial

__all__ = ["AlignmentReport", "AlignmentThresholds", "LoopConfig", "TrialCurve", "TrialFaults", "TrialPlan",
           "TrialResult", "compare_curves", "plan_from_results", "run_trial"]
