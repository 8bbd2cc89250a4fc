"""Test scaffolding, **for tests only** (like `prefect.testing`): nothing in day0 imports it.

- `faults`: training bugs injected on purpose (`TrialFaults`), and `FaultDrillSettings`, which lets a
  test reach a whole `day0 run` subprocess through the environment (`DAY0_TRIAL_FAULTS`).
- `fault_matrix`: every catalogued fault (tests/data/faults/) through every validation layer, with
  clean runs for the false-alarm rate: the detection power `tests/test_fault_matrix.py` checks and
  `benchmarks/bench_faults.py` records.
- `chaos`: kill a Ray node under a training run and let Ray Train recover.
- `ray`: `local_head`, a private Ray head (own ports, own process group) for job-submission tests.
- `webhook`: realistic hub payloads, and `Receiver`, `day0 webhook serve` as a restartable subprocess.
- `pod_runner`: `PodRunner`, a process kubelet whose Nodes run their pods (KubeRay's Ray pods
  included) as real local processes, for the Kubernetes e2e tests.

A real run never sets any of these; the spec has no field for them, and a run that had them active
says so in its step's notes.
"""
