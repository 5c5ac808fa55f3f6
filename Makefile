# `make test` on a fresh clone creates .venv, installs detsamplers with its dev extras
# against constraints.txt (the CPU build of torch), and runs ruff, mypy --strict and pytest.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install check test bench bench-quick clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

check: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

test: check
	$(PY) -m pytest
	$(MAKE) bench-quick

bench-quick: $(STAMP)
	$(PY) benchmarks/samplers_table.py --quick

bench: $(STAMP)
	$(PY) -m pytest benchmarks --benchmark-only --benchmark-columns=min,median,max,rounds
	$(PY) benchmarks/samplers_table.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis .benchmarks
