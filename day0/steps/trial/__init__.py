"""Step 5: small-scale trial training on Ray Train, loss-curve alignment, checkpoints and recovery.

Contracts: `run_trial(spec, model, checkpoint_uri=..., plan=..., memory_estimate=...)` is the step's
entry point; `model` is step 1's `ResolvedModel`, and what other steps decide (the plan, the memory
estimate) comes in as values, so this package imports no other step's code. It returns a
`TrialResult` (a `StepResult`: verdict, `to_markdown()`, `files()` -> the loss overlay PNG). The
alignment maths (`alignment`) are pure and judge by the spec's `TrialTolerance`; the loop (`loop`)
runs per Ray Train worker, is deterministic, and exposes `LoopHooks` (fault drills live in
`faults`); runs (`ray_train`) resume from their last checkpoint under the same (storage URI, name).
Modules import torch/ray lazily where they can; import each name from its module (this package
re-exports nothing).
"""
