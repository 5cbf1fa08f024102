# Two commands do all the set-up on a fresh machine with Python 3.12:
#   make demo   write a sharded dataset and read it back on a local dask cluster
#   make test   lint (ruff), type-check (mypy), build the docs site and run the whole test
#               suite, the site in headless Chromium included; then the fast part of the
#               suite on Python 3.13 with zarr and xarray from the middle of the versions
#               pyproject allows, and on the lowest versions it declares (test-3.13 and
#               test-lowest below)
# Both create .venv with Python 3.12: the demo installs shardwise alone (its runtime
# dependencies), the tests add its extras and the development tools (pyproject's dependency
# groups: test, lint, docs, bench, and dev, which holds them all).

PYTHON ?= $(shell command -v python3.12 2>/dev/null || command -v python3 2>/dev/null)
# Python 3.13 for test-3.13: on PATH, else pyenv's (a pyenv shim refuses a version that the
# directory's .python-version does not name)
PYTHON313 ?= $(shell for p in $$(command -v python3.13) $$(pyenv root 2>/dev/null)/versions/3.13*/bin/python3.13; do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null && echo "$$p" && break; done)
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed

.PHONY: demo test soak venvs test-main test-lowest test-3.13 chromium azurite lint docs docs-serve bench bench-quick clean

# Packages are installed with uv (from PyPI, into each environment by pip first): the
# same versions pip resolves here, in seconds where pip takes minutes. Compiled to
# bytecode as they are installed (as pip does), and shardwise's own modules too: where
# PYTHONDONTWRITEBYTECODE is set (CI), nothing is compiled on import, and every process
# the suite starts (cluster workers, command-line runs, servers) would compile all it
# imports again (the whole suite took half as long again)
# $(call UV,venv): uv's pip interface for that environment
UV = $(1)/bin/uv pip install --quiet --compile-bytecode --python $(1)/bin/python
# $(call COMPILED,venv): shardwise's modules compiled for that environment's Python
COMPILED = $(1)/bin/python -m compileall -q src
# the extras the suite needs beside the dependency groups (the object-store, HTTP and
# Icechunk tests): every extra pyproject has
EXTRAS := s3,icechunk,gcs,azure,http

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "shardwise needs Python >= 3.12, found " + sys.version.split()[0] + " at " + sys.executable)'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv

$(RUNTIME): pyproject.toml $(VENV)/bin/python
	$(call UV,$(VENV)) -e .
	$(call COMPILED,$(VENV))
	touch $(RUNTIME)

$(STAMP): pyproject.toml $(VENV)/bin/python
	$(call UV,$(VENV)) -e '.[$(EXTRAS)]' --group dev
	$(call COMPILED,$(VENV))
	touch $(STAMP) $(RUNTIME)

demo: $(RUNTIME)
	$(BIN)/python -m shardwise.demo

lint: $(STAMP)
	$(TIMED) ruff $(BIN)/ruff check src tests benchmarks .ci docs/_hooks
	$(TIMED) ruff-format $(BIN)/ruff format --check src tests benchmarks .ci docs/_hooks
	$(TIMED) mypy $(BIN)/mypy
	$(TIMED) lint-imports $(BIN)/lint-imports --no-cache

test: venvs test-main test-3.13 test-lowest

# the three environments at once (their installs mostly wait on disk and network), and
# Azurite beside them
venvs:
	$(TIMED) venvs $(MAKE) --no-print-directory -j3 $(STAMP) $(LOWEST)/.installed $(if $(PYTHON313),$(PY313)/.installed) $(AZURITE)

# Azurite, the Azure Blob Storage emulator the object-store tests run against
# (tests/azurite.py), from npm into .ci/azurite/node_modules: the release package-lock.json
# pins, installed as locked (npm ci). fake-gcs-server, the GCS one, comes with the test
# group (PyPI). Without npm the Azure tests are skipped, but under CI=true, where this fails.
AZURITE := .ci/azurite/node_modules/.installed
azurite: $(AZURITE)
$(AZURITE): .ci/azurite/package.json .ci/azurite/package-lock.json
	@if command -v npm >/dev/null; then \
		$(TIMED) azurite npm ci --prefix .ci/azurite --no-audit --no-fund --loglevel=error && touch $@; \
	elif [ -n "$$CI" ]; then echo "no npm: Azurite cannot be installed (.ci/azurite)"; exit 1; \
	else echo "no npm: the Azure emulator tests are skipped"; fi

# Every pytest run is bounded in wall-clock time (minutes): at the bound it is interrupted
# (SIGINT: pytest prints what ran and where it stood), then killed a minute later. Each
# test is bounded too (pytest-timeout, pyproject), and the suite's conftest ends a
# process that does not exit after the session (a stuck thread), so a stuck test fails
# the run in minutes instead of holding CI to its limit.
MAIN_MINUTES ?= 45
FAST_MINUTES ?= 20
BOUNDED = timeout --signal=INT --kill-after=60
# each step of make test records how long it took in .ci/times.log (.ci/run prints it)
TIMED = .ci/timed
# the suite runs on every core, up to 4 processes (pytest-xdist); PARALLEL= runs it in one
PARALLEL ?= --numprocesses=auto --maxprocesses=4

# the concurrency, cluster and object-store tests, 20 times under load (docs/contributing.md)
SOAK_ARGS ?= --repeat 20 --load 2
soak: $(STAMP) $(AZURITE)
	$(BIN)/python .ci/soak.py $(SOAK_ARGS)

# the whole suite on the newest versions and the built site in Chromium; first, side by
# side (each mostly one core), lint, Chromium's install and the docs build, which runs the
# notebooks (a cell that raises fails it)
test-main: $(STAMP) $(AZURITE)
	$(MAKE) --no-print-directory -j3 --output-sync=target lint docs chromium
	$(TIMED) test-main $(BOUNDED) $(MAIN_MINUTES)m $(BIN)/python -m pytest $(PARALLEL) --benchmark-disable $(PYTEST_ARGS)

# The promises pyproject makes, tested: the fast part of the suite (no slow cases, a cover
# of each test matrix rather than all of it (tests/matrix.py), no notebooks, no packaging,
# site or command-line checks, not dask's and xarray's own suites, which are the newest
# releases' tests) on Python 3.13 with releases from the middle of the window (MIDDLE
# below), and on the lowest versions of the dependencies it declares (.ci/lowest.py pins
# them).
FAST := tests -m "not slow and not exhaustive" -o addopts="-ra --strict-markers" -p no:cacheprovider \
	--ignore=tests/test_packaging.py --ignore=tests/test_site.py --ignore=tests/cli \
	--ignore=tests/array/test_dask_suite.py --ignore=tests/xarray/test_xarray_suite.py
LOWEST := .venv-lowest
PY313 := .venv-3.13
# The Python 3.13 run takes the middle of the window, where it breaks: zarr-python 3.2
# and 3.3 have rectilinear grids but still hold codec settings as enums (zarr 3.1, the
# floor, has no rectilinear grids; 3.4 holds strings), and xarray before 2026.9 cannot
# write rectilinear grids (shardwise refuses, naming the release). The newest releases
# run on Python 3.12 (test-main), the floors on Python 3.12 too (test-lowest).
MIDDLE := zarr==3.3.0 xarray==2026.7.0

test-lowest: $(LOWEST)/.installed $(AZURITE)
	$(TIMED) test-lowest $(BOUNDED) $(FAST_MINUTES)m $(LOWEST)/bin/python -m pytest $(FAST) $(PARALLEL) $(PYTEST_ARGS)

# two steps: the declared dependencies at their floors first, then the test tools held to
# what that installed (one step sends pip's resolver backtracking through moto's history)
$(LOWEST)/.installed: pyproject.toml .ci/lowest.py
	rm -rf $(LOWEST)
	$(PYTHON) -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install --quiet --upgrade pip uv
	$(LOWEST)/bin/python .ci/lowest.py pyproject.toml > $(LOWEST)/lowest.txt
	$(call UV,$(LOWEST)) --only-binary :all: -c $(LOWEST)/lowest.txt \
		-e '.[$(EXTRAS)]' 's3fs[boto3]'
	$(LOWEST)/bin/uv pip freeze --python $(LOWEST)/bin/python --exclude-editable \
		| grep -v '^uv==' > $(LOWEST)/floor.txt
	$(call UV,$(LOWEST)) --only-binary :all: -c $(LOWEST)/floor.txt -e '.[$(EXTRAS)]' --group test
	$(call COMPILED,$(LOWEST))
	touch $@

test-3.13: $(AZURITE)
	@if [ -z "$(PYTHON313)" ]; then \
		if [ -n "$$CI" ]; then echo "no Python 3.13 found (PYTHON313=...)"; exit 1; fi; \
		echo "no Python 3.13 found: the Python 3.13 run is skipped (set PYTHON313=...)"; \
	else $(MAKE) --no-print-directory $(PY313)/.installed && \
		$(TIMED) test-3.13 $(BOUNDED) $(FAST_MINUTES)m $(PY313)/bin/python -m pytest $(FAST) $(PARALLEL) $(PYTEST_ARGS); fi

$(PY313)/.installed: pyproject.toml Makefile
	rm -rf $(PY313)
	$(PYTHON313) -m venv $(PY313)
	$(PY313)/bin/python -m pip install --quiet --upgrade pip uv
	$(call UV,$(PY313)) -e '.[$(EXTRAS)]' --group test $(MIDDLE)
	$(call COMPILED,$(PY313))
	touch $@

# Debian's Chromium for the site check (tests/test_site.py), installed when missing and
# this is root on a Debian machine; elsewhere the check is skipped (but under CI=true)
chromium:
	@$(TIMED) chromium sh -c '$(INSTALL_CHROMIUM)'

INSTALL_CHROMIUM = command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get install -y -q chromium >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; }; } || \
		echo "no Chromium: the site check is skipped"

# the documentation site (MkDocs + Material + mkdocstrings + mkdocs-jupyter) into site/,
# warnings as errors; the notebooks are executed as part of the build
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(TIMED) docs $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# The benchmarks (docs/benchmarks/): `make bench BENCH="benchmarks/inventory.py --shards 100"`
# runs one script through benchmarks/run.py, which prints what the script prints after a
# header (command, date, commit, machine, versions); KEEP=NAME also keeps that in
# benchmarks/results/NAME.txt (each page gives the command of what it shows). Run them on
# an otherwise idle machine. `make bench-quick` smoke-runs every script at small sizes,
# keeping nothing (tests/test_benchmarks.py, tests/test_remote_bench.py); `make
# bench-micro` times the micro-benchmarks (pytest-benchmark, tests/benchmarks/), which the
# suite runs once each, untimed.
.PHONY: bench-micro stress
bench: $(STAMP)
	@test -n "$(BENCH)" || { echo 'make bench BENCH="benchmarks/<script>.py [arguments]" [KEEP=<name>]'; exit 2; }
	$(BIN)/python benchmarks/run.py $(if $(KEEP),--keep $(KEEP)) $(BENCH)

bench-quick: $(STAMP)
	SHARDWISE_BENCH_SMOKE=1 $(BIN)/python -m pytest tests/test_benchmarks.py tests/test_remote_bench.py $(PYTEST_ARGS)

bench-micro: $(STAMP)
	$(BIN)/python -m pytest tests/benchmarks --benchmark-enable --benchmark-sort=name $(PYTEST_ARGS)

# the stress tests (tests/stress/): what the suite checks, longer and harder (faults at
# high rates on every operation, more writers, longer races); an hour or more
stress: $(STAMP)
	$(BOUNDED) 180m $(BIN)/python -m pytest tests/stress -m stress $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(LOWEST) $(PY313) .ci/azurite/node_modules demo-data site benchmarks/data .pytest_cache .mypy_cache .ruff_cache .hypothesis
