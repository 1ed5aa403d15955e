# The README's two set-up commands are `make up` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: install up test browser redis lint typecheck lockfiles unit fast bench goldens clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## Installs, then runs the main job on embedded defaults.
up: install
	$(BIN)/countersign up

## Installs, then runs every check CI runs: lint, types, all tests.
test: install browser redis lint typecheck lockfiles unit

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck:
	$(BIN)/mypy components tests bench usecases

## Debian's chromium for the browser tests (Playwright drives it; installed once).
browser:
	@command -v chromium >/dev/null 2>&1 || { echo "installing Debian's chromium for the browser tests ..."; \
	  apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q chromium; }; }

## Debian's redis-server for n8n's queue mode (COUNTERSIGN_N8N_WORKERS > 0; its tests).
redis:
	@command -v redis-server >/dev/null 2>&1 || { echo "installing Debian's redis-server for n8n's queue mode ..."; \
	  apt-get install -y -q redis-server >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q redis-server; }; }

## Fast guard (seconds): npm ci --dry-run on a copy of every deploy/*/package*.json.
lockfiles:
	$(BIN)/countersign n8n check-lockfiles

unit:
	$(BIN)/pytest -q

## Only the tests that need no real server (seconds to minutes); `make test` runs everything.
fast: install
	$(BIN)/pytest -q -m "not slow"

bench: install
	$(BIN)/pip install --quiet -e '.[dev,bench]'  # bench-only extra: LangGraph (bench_approve_write)
	for b in bench/bench_*.py; do echo "## $$b"; $(BIN)/python $$b; done

goldens: install
	COUNTERSIGN_UPDATE_GOLDENS=1 $(BIN)/pytest -q tests/test_usecase_goldens.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
