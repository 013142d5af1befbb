# The two commands of the README's quick start: `make demo` and `make test`.
# `make test-fast` is the edit-test loop: everything not marked slow (what slow means:
# pyproject's marker), the golden drift check included.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo check test test-fast test-durations bench bench-stdio regen-golden cluster

$(BIN)/agentgen: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $(BIN)/agentgen

setup: $(BIN)/agentgen

demo: setup
	$(BIN)/python examples/demo.py

# House rules (what CI runs before the tests): lint with the repository's rule set
# (complexity C90 at 12, private access SLF, ...), formatting, and mypy --strict over
# agentgen's own code, the bar its generated projects are held to.
check: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy generator templates/runtime

# Three workers on the two cores: much of the suite waits (on agents, servers, pip, a
# 35 s silence), and with two workers the cores were busy ~86% of the run (16.5 min; 14.2
# with three, 2026-12-07). A module's tests run on one worker (its module fixtures built
# once, not once a worker), the longest modules first (tests/durations.json):
# tests/conftest.py.
XDIST := -n 3 --dist loadscope --no-loadscope-reorder

test: setup
	$(BIN)/pytest -q $(XDIST)

test-fast: setup
	$(BIN)/pytest -q $(XDIST) -m "not slow"

# tests/durations.json anew (seconds a test, from a whole run): what orders the units
test-durations: setup
	AGENTGEN_RECORD_DURATIONS=tests/durations.json $(BIN)/pytest -q $(XDIST)

bench: setup
	$(BIN)/python bench/run_all.py

# the stdio table alone: default (SQLite) and memory stores vs the SDK and the ceiling
bench-stdio: setup
	$(BIN)/python bench/bench_stdio.py

# Every expected output in one go (then read `git diff` before committing it): the golden
# projects, the dogfood manifest models, and the expected files of every tests/cases/ kind
# (naming, diff, schema_errors, manifests, registry: their walkers compare through
# tests/expected_support.py, which rewrites under AGENTGEN_UPDATE_CASES=1).
CASE_WALKERS := tests/generator/test_protocol_cases.py tests/generator/test_protocol_schema.py \
	tests/generator/test_manifest_validate.py tests/scaffold/test_registry.py
regen-golden: setup
	PYTHONPATH=. $(BIN)/python tests/regen_golden.py
	$(BIN)/python generated/manifest/regen.py
	AGENTGEN_UPDATE_CASES=1 $(BIN)/pytest -q -p no:randomly -m "not slow" $(CASE_WALKERS)

# PostgreSQL + Redis + 3 replicas + HAProxy on 127.0.0.1, one replica killed mid-turn
# (Debian packages: postgresql redis-server haproxy)
cluster: setup
	$(BIN)/python bench/cluster.py
