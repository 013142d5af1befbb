# The two commands of the README's quick start: `make demo` and `make test`.
# `make test-fast` is the edit-test loop: everything not marked slow (fuzzers, soak,
# golden rebuilds, interop, the wheel), in well under a minute.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-fast bench bench-stdio regen-golden cluster

$(BIN)/agentgen: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $(BIN)/agentgen

setup: $(BIN)/agentgen

demo: setup
	$(BIN)/python examples/demo.py

test: setup
	$(BIN)/pytest -q -n 2

test-fast: setup
	$(BIN)/pytest -q -n 2 -m "not slow"

bench: setup
	$(BIN)/python bench/run_all.py

# the stdio table alone: default (SQLite) and memory stores vs the SDK and the ceiling
bench-stdio: setup
	$(BIN)/python bench/bench_stdio.py

regen-golden: setup
	$(BIN)/python tests/regen_golden.py

# PostgreSQL + Redis + 3 replicas + HAProxy on 127.0.0.1, one replica killed mid-turn
# (Debian packages: postgresql redis-server haproxy)
cluster: setup
	$(BIN)/python bench/cluster.py
