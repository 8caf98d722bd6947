# Two commands for a newcomer: `make demo` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint unit bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/sluicegate demo

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest

bench: $(BIN)/.installed
	$(BIN)/python bench/gateway_bench.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
