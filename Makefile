# Alfred. Needs only python3 (>= 3.11): everything else comes from pyproject.toml into .venv.
#   make run    embedded PostgreSQL + Redis, migrate, demo login/token, web + worker + beat
#   make test   ruff, ruff format --check, mypy, pytest

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install venv browser screenshots run test lint fmt bench bench-engine bench-lanes bench-acceptance bench-add-subdomain bench-add-certificate bench-add-domain bench-update-lambda-version bench-events clean migrations-check

help:
	@echo "make run               start Alfred locally (Ctrl-C stops everything)"
	@echo "make test              lint, type-check and run the test suite"
	@echo "make lint              ruff check, ruff format --check, mypy"
	@echo "make fmt               ruff format + ruff check --fix"
	@echo "make migrations-check  fail if a model change lacks a migration"
	@echo "make bench             run the benchmarks (python -m bench; reports in bench/reports)"
	@echo "make bench-engine      the engine's per-step cost and throughput vs a bare chain"
	@echo "make bench-add-subdomain  a no-operator add-subdomain end to end, split by stage"
	@echo "make bench-add-certificate  a certificate requested, validated and issued, by stage"
	@echo "make bench-add-domain  add-domain and onboard-domain end to end, split by stage"
	@echo "make bench-update-lambda-version  a fleet's alias moved end to end, split by stage"
	@echo "make bench-events      SSE latency (200 clients) and webhook delivery throughput"
	@echo "make screenshots       the admin's pages as PNGs in docs/screenshots (needs chromium)"
	@echo "make clean             delete local state (.alfred/: database, broker, demo login)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Re-install only when pyproject.toml changes (or the venv was recreated).
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,sandbox]'
	@touch $@

# Debian's chromium for the admin's browser tests (skipped, with the reason, where it can't be had).
browser:
	@scripts/install-browser

install venv: $(STAMP) browser

# exec: the launcher replaces the recipe's shell, so signals reach it directly.
run: $(STAMP)
	exec $(BIN)/python -m alfred.devstack

# pytest's exit code 5 ("no tests collected") is non-zero, so make fails on it too.
test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	DJANGO_SETTINGS_MODULE=alfred.settings_test $(BIN)/pytest

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

bench-acceptance: $(STAMP)
	$(BIN)/python -m bench acceptance

bench-add-subdomain: $(STAMP)
	$(BIN)/python -m bench add_subdomain

bench-add-certificate: $(STAMP)
	$(BIN)/python -m bench add_certificate

bench-add-domain: $(STAMP)
	$(BIN)/python -m bench add_domain

bench-events: $(STAMP)
	$(BIN)/python -m bench events

bench-update-lambda-version: $(STAMP)
	$(BIN)/python -m bench update_lambda_version

# Stop `make run` first: this deletes the data directories of its servers.
clean:
	rm -rf .alfred
