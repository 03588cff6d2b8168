# `make demo` and `make test` work on a fresh clone: they create .venv and install what is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MODEL_DIR := $(abspath ../shared/models/all-MiniLM-L6-v2-onnx)

# The shipped model, when it sits beside the checkout (this machine has no model hub).
ifneq ($(wildcard $(MODEL_DIR)/model.onnx),)
export FITTEST_EMBEDDING_MODEL_PATH ?= $(MODEL_DIR)
endif

.PHONY: install demo test typecheck test-fast test-durations up clean bench-selection bench-supervised bench-evolution

# pip compiles the installed modules one at a time (24 of the install's 48 s here); compileall
# does it in a process per core (14 s). The bytecode is kept for shells that set
# PYTHONDONTWRITEBYTECODE, where a command would otherwise compile what it imports each time it
# starts (`fittest --help`: 1.9 s instead of 1.0).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile -e '.[test]'
	$(BIN)/python -m compileall -q -j 0 $(VENV)/lib
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/fittest demo

up: $(STAMP)
	$(BIN)/fittest up

# One pytest session; the slow chaos and bench smoke tests are collected last (tests/conftest.py)
# and `--no-loadscope-reorder` keeps pytest-xdist handing the files out in that order, so a quick
# failure shows early and a slow file starts as soon as a process is free. (Two sessions, the slow
# one after the fast, left processes idle at the end of each: 8 min 51 s against 8 min 14 s in one,
# on a 2-core AMD EPYC.) Each process starts its own private Redis, so their workers and keys never
# meet. Much of a test's time is spent waiting on worker processes, so three processes on two
# cores beat two (the fast tests: 7 min 31 s against 6 min 21 s); four gained nothing then (8 min 19 s),
# but on a later 2-core AMD EPYC host four took 8 min 48 s where three took 9 min 41 s (the same tests,
# one run each), and `make test` with three passed 10 minutes there. Session 56, on a 2-core Intel
# Xeon, after the longest files went first: four took pytest 9 min 11 s, five 7 min 16 s (the same
# clone, one after the other); the tests wait on purpose (outages, stops, leases) more than they compute.
# The machine sets PYTHONDONTWRITEBYTECODE; the tests start hundreds of Python processes (workers,
# CLI runs), so here the compiled modules are kept: each pytest process collected in 6.9 s instead
# of 10.6 s.
TEST_PROCESSES ?= 5
unexport PYTHONDONTWRITEBYTECODE
test: $(STAMP) typecheck
	$(BIN)/python -m pytest -q -rs -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder --durations=15

# The type hints are checked, as the code's reader relies on them (pyproject.toml's [tool.mypy]).
typecheck: $(STAMP)
	$(BIN)/python -m mypy

# Each test file's seconds, into tests/durations.json: the longest files are handed out first.
test-durations: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder --store-durations

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -q -x

bench-selection: $(STAMP)
	$(BIN)/fittest bench selection --tools ../shared/data/metatool/tools.json \
	  --queries ../shared/data/metatool/queries_dev.csv --reveal-missed --json bench-selection.json

bench-supervised: $(STAMP)
	$(BIN)/fittest bench supervised --tools ../shared/data/metatool/tools.json \
	  --queries ../shared/data/metatool/queries_dev.csv --json bench-supervised.json

bench-evolution: $(STAMP)
	$(BIN)/fittest bench evolution --json bench-evolution.json

clean:
	rm -rf $(VENV) .fittest build *.egg-info .mypy_cache
