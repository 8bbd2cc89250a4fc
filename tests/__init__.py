"""day0's tests: `unit/<area>` (one folder per step or library, no service), `integration/` (real
Prefect, Ray or S3 servers, or a whole run), `e2e/` (the Kubernetes test control plane), and `fixtures/`
(shared helpers and test inputs, imported as `tests.fixtures.<name>`); data files in `data/`."""
