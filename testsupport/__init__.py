"""Test scaffolding, **for tests and benchmarks only** (like `prefect.testing`): nothing in day0
imports it, and it is not part of the product wheel (tests/unit/architecture/test_wheel_contents.py checks). It is
imported from the checkout: pytest puts the repository root on the path (pyproject's `pythonpath`),
`python -m benchmarks.run` and `python -m testsupport.pod_runner` run from the root.

- `fault_matrix`: every catalogued fault (tests/data/faults/) through every validation layer, with
  clean runs for the false-alarm rate: the detection power `tests/integration/test_fault_matrix.py` checks and
  `benchmarks/bench_faults.py` records.
- `chaos`: kill a Ray node under a training run and let Ray Train recover.
- `ray`: `local_head`, a private Ray head (own ports, own process group) for job-submission tests.
- `webhook`: realistic hub payloads, and `Receiver`, `day0 webhook serve` as a restartable subprocess.
- `pod_runner`: `PodRunner`, a process kubelet whose Nodes run their pods (KubeRay's Ray pods
  included) as real local processes, for the Kubernetes e2e tests.

The training bugs injected on purpose (`TrialFaults`, `DAY0_TRIAL_FAULTS`) are a trial feature of
the product: `day0/steps/trial/faults.py`.
"""
