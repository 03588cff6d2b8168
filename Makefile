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

.PHONY: install demo test typecheck test-fast test-slow up clean bench-selection bench-supervised bench-evolution

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/fittest demo

up: $(STAMP)
	$(BIN)/fittest up

# Fast tests first, then the slow chaos and bench smoke tests, so a quick failure shows early.
# Pytest processes share the files (a module's workers stay in one); each process starts its own
# private Redis, so their workers and keys never meet. Much of a test's time is spent waiting on
# worker processes, so more test processes than cores still shorten the run: on an AMD EPYC host
# (2 cores, AVX2) the fast part took 7 min 31 s in two processes and 6 min 21 s in three.
# The slow tests wait more still (their user time is ~45 % of their wall time): three processes
# took their part from ~3 min to ~2 min 10 s on an Intel Xeon, passing every time.
TEST_PROCESSES ?= 3
SLOW_TEST_PROCESSES ?= 3
test: $(STAMP) typecheck
	$(BIN)/python -m pytest -m "not slow" -q -n $(TEST_PROCESSES) --dist loadfile
	$(BIN)/python -m pytest -m slow -q -n $(SLOW_TEST_PROCESSES) --dist loadfile; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]

# The type hints are checked, as the code's reader relies on them (pyproject.toml's [tool.mypy]).
typecheck: $(STAMP)
	$(BIN)/python -m mypy

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
