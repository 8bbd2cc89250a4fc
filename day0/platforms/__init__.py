"""What a platform runs, shared by the steps that run ops on it (step 2 checks them, step 5 trains
on them): the kernel table and the dispatch mode that routes aten calls through it (`kernels`),
the adapted kernels step 2 registers and hands on as data (`adapted`), and the operator library
read from the vendor's packages (`wheels`, `libraries`), which step 1 diffs the model against.

Contract: nothing here imports a step package; `day0.steps.operators` and `day0.steps.trial` both import this.
"""
