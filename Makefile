# `make demo` and `make test` each create the virtual environment if it is missing, install
# torch 2.13.0 first (a CPU wheel lies on the build machines' disk; any other version downloads
# gigabytes), then the package with its extras at the exact versions of constraints.txt (the
# lower bounds of pyproject.toml's ranges), so every build tests the same versions.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.attnsvm-installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]' -c constraints.txt
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/attnsvm demo

test: lint
	$(BIN)/python -m pytest -n 2 -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache
