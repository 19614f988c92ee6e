# The two commands of the README: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo test test-slow bench bench-failures clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fabricjax analyze scenarios/quickstart.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	$(BIN)/python bench/bench_foundation.py

bench-failures: $(STAMP)
	$(BIN)/python bench/bench_failures.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
