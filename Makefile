# Two commands do all the set-up on a fresh machine with Python 3.12:
#   make demo   write a sharded dataset and read it back on a local dask cluster
#   make test   lint (ruff), type-check (mypy) and run the whole test suite
# Both create .venv with Python 3.12: the demo installs shardwise alone (its runtime
# dependencies), the tests add the test extras.

PYTHON ?= $(shell command -v python3.12 2>/dev/null || command -v python3 2>/dev/null)
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed

.PHONY: demo test lint docs docs-serve bench bench-scaling clean

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "shardwise needs Python >= 3.12, found " + sys.version.split()[0] + " at " + sys.executable)'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME): pyproject.toml $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME)

$(STAMP): pyproject.toml $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP) $(RUNTIME)

demo: $(RUNTIME)
	$(BIN)/python -m shardwise.demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test: lint docs
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# the documentation site (MkDocs + Material + mkdocstrings + mkdocs-jupyter) into site/,
# warnings as errors; the notebooks are executed as part of the build
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

bench: $(STAMP)
	$(BIN)/python benchmarks/peers.py --data u2-3d,f4-2d,f4-3d
	$(BIN)/python benchmarks/read_throughput.py
	$(BIN)/python benchmarks/write_throughput.py
	$(BIN)/python benchmarks/read_fanout.py
	$(BIN)/python benchmarks/rectilinear.py
	$(BIN)/python benchmarks/encode_split.py
	$(BIN)/python benchmarks/migrate.py
	$(BIN)/python benchmarks/reshard.py
	$(BIN)/python benchmarks/inventory.py
	$(BIN)/python benchmarks/task_profile.py
	$(BIN)/python benchmarks/single_shard.py
	$(BIN)/python benchmarks/icechunk_misaligned.py
	$(BIN)/python benchmarks/decode_bomb.py
	$(BIN)/python benchmarks/giant_grid.py

bench-scaling: $(STAMP)
	$(BIN)/python benchmarks/scaling.py

clean:
	rm -rf $(VENV) demo-data site benchmarks/data .pytest_cache .mypy_cache .ruff_cache .hypothesis
