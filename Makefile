# `make test` and `make bench` set everything up from a machine that has only Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: test test-fast test-as bench bench-readme docs lint clean runtime fuzz

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# --no-compile: pip compiles no bytecode of the dependencies at install (some 40 CPU seconds for
# all of torch, JAX, Sphinx, ...); an interpreter writes it for the modules it imports, the first
# time (the tests set PYTHONDONTWRITEBYTECODE= so that it does).
$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --no-compile -e '.[test]'
	touch $@

$(VENV)/.bench-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $@

# Kernels run their parallel loops on tensorad's own pool (codegen/pool.py); libgomp is linked by
# exported kernels (kernel.export) and used on request (TENSORAD_PARALLEL_RUNTIME=gomp): install
# it when it is missing and we may.
runtime:
	@ldconfig -p 2>/dev/null | grep -q libgomp.so.1 || \
	  { [ "$$(id -u)" = 0 ] && (apt-get install -y -q libgomp1 >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libgomp1 >/dev/null 2>&1)) ; } || \
	  echo "note: libgomp1 not installed; exported parallel kernels cannot be linked"

# The tests write bytecode even where PYTHONDONTWRITEBYTECODE is set: the interpreters they start
# (benchmarks, fuzz workers, export and cache checks) read tensorad compiled once, not each anew.
TEST_ENV := PYTHONDONTWRITEBYTECODE=

# --dist worksteal: each worker starts on half of the tests (the first, the tests marked slow) and
# an idle one takes half of what the other has left; pytest-xdist's default (load) hands the first
# worker a fixed eighth of the suite, every test marked slow in it, which it alone runs.
XDIST := -n 2 --dist worksteal

test: $(VENV)/.test-installed runtime
	$(TEST_ENV) TENSORAD_TEST_EXTRAS=1 $(BIN)/python -m pytest $(XDIST) tests

# The fast tier for a developer's loop (under two minutes on two cores): the core, the
# optimizer, the error messages, the regressions and the project's shape, less the tests marked
# slow, each deep random search at a quarter of its examples (tests/strategies.py's `examples`);
# `make test` runs all, at every example.
FAST := tests/tensorad tests/simplify tests/errors tests/regressions tests/test_architecture.py \
        tests/test_source_history.py
test-fast: $(VENV)/.test-installed
	$(TEST_ENV) TENSORAD_TEST_TIER=fast $(BIN)/python -m pytest $(XDIST) -m 'not slow' $(FAST)

# the suite as if on another CPU (tools/pretend_cpu.py): an AMD EPYC Zen 3 by default, AVX2 only
CPU ?= znver3,512
test-as: $(VENV)/.test-installed
	$(TEST_ENV) TENSORAD_PRETEND_CPU=$(CPU) PYTHONPATH=tools $(BIN)/python -m pytest $(XDIST) -p pretend_cpu $(or $(TESTS),tests)

# results go to the untracked benchmarks/results/; `make bench-readme` publishes the latest run as
# the README's table and chart (benchmarks/readme/), and refuses a quick or busy one
bench: $(VENV)/.bench-installed runtime
	$(BIN)/python -m benchmarks $(ARGS)

bench-readme: $(VENV)/.test-installed
	$(BIN)/python -m benchmarks.readme $(ARGS)

# the API reference (Sphinx, from the docstrings) in the untracked docs/_build/html
docs: $(VENV)/.test-installed
	$(BIN)/python -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

lint: $(VENV)/.test-installed
	$(BIN)/ruff check tensorad simplify codegen benchmarks tests examples fuzz

clean:
	rm -rf $(VENV) build *.egg-info docs/_build

# Differential fuzzing (fuzz/): N random programs, every check (the cheap-gradient principle
# too), reproducers in fuzz-failures/; first the whole work gate's corpus (tests/golden).
N ?= 10000
fuzz: $(VENV)/.test-installed runtime
	TENSORAD_WORK_GATE=full $(BIN)/python -m pytest $(XDIST) tests/golden
	$(BIN)/python -m fuzz --n $(N) $(ARGS)
