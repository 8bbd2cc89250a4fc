"""Cluster backends: where Ray work runs (`local` on this machine, `kuberay` on Kubernetes).

Contract: every backend hands the same job code a Ray head address; job submission lives in
`day0.backends.jobs` and is shared, so a laptop run and a 256-node run take one code path. `base`
says what a backend is; each backend is a folder with its own (`local/`, `kuberay/`); `session`
chooses the run's, opens it around the run's steps and checks its preconditions. Backend modules are
imported lazily by name (the kubernetes client is only needed for kuberay).
"""

__all__: list[str] = []
