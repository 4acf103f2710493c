# `make demo` and `make test` each create the virtual environment if it is missing, install
# torch 2.13.0 first (a CPU wheel lies on the build machines' disk; any other version downloads
# gigabytes), then the package with every extra (all: the features; dev: the tests; docs: the
# site) at the exact versions of constraints.txt (the lower bounds of pyproject.toml's ranges),
# so every build tests the same versions.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.attnsvm-installed

.PHONY: demo test lint docs bench clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[all,dev,docs]' -c constraints.txt
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/attnsvm demo

test: lint docs
	$(BIN)/python -m pytest -n 2 -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check src tests benchmarks

# the documentation site in strict mode (a broken link or reference fails), built into a
# temporary folder and thrown away: a check, a few seconds
docs: $(STAMP)
	@site=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet \
		--site-dir "$$site"; status=$$?; rm -rf "$$site"; exit $$status

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache
