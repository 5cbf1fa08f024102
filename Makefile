# Two commands do all the set-up on a fresh machine with Python 3.12:
#   make demo   write a sharded dataset and read it back on a local dask cluster
#   make test   lint (ruff), type-check (mypy) and run the whole test suite
# Both create .venv with Python 3.12 and install shardwise with its test dependencies.

PYTHON ?= $(shell command -v python3.12 2>/dev/null || command -v python3 2>/dev/null)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-scaling clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "shardwise needs Python >= 3.12, found " + sys.version.split()[0] + " at " + sys.executable)'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m shardwise.demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/read_throughput.py
	$(BIN)/python benchmarks/write_throughput.py
	$(BIN)/python benchmarks/read_fanout.py
	$(BIN)/python benchmarks/rectilinear.py
	$(BIN)/python benchmarks/encode_split.py
	$(BIN)/python benchmarks/migrate.py
	$(BIN)/python benchmarks/reshard.py
	$(BIN)/python benchmarks/inventory.py

bench-scaling: $(STAMP)
	$(BIN)/python benchmarks/scaling.py

clean:
	rm -rf $(VENV) demo-data benchmarks/data .pytest_cache .mypy_cache .ruff_cache .hypothesis
