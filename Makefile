# The README's two commands are `make run` and `make test`; both install what they need first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider

.PHONY: install run test test-integration chaos bench bench-smoke lint clean

$(STAMP): pyproject.toml clients/python/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q -e clients/python
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/runq dev

test: install
	$(PYTEST) tests

test-integration: install
	$(PYTEST) tests/unit tests/integration

# The soak at full size (its figures go to tests/artifacts/soak.json), then the other chaos
# tests at their own size: RUNQ_CHAOS_RUNS scales the soak only.
chaos: install
	RUNQ_CHAOS_RUNS=$${RUNQ_CHAOS_RUNS:-5000} $(PYTEST) -m chaos tests/chaos/test_soak.py
	env -u RUNQ_CHAOS_RUNS $(PYTEST) -m chaos tests/chaos --deselect tests/chaos/test_soak.py

bench: install
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python -m bench

bench-smoke: install
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python -m bench --smoke

lint: install
	$(BIN)/ruff check app tests clients
	$(BIN)/mypy app
	cd clients/python && ../../$(BIN)/mypy --strict

clean:
	rm -rf $(VENV) .runq *.egg-info
