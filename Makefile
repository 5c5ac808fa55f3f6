# `make test` on a fresh clone creates .venv, installs detsamplers with its dev extras
# against constraints.txt (the CPU build of torch), and runs ruff, mypy --strict and pytest.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
COMPARE_STAMP := $(VENV)/.installed-compare

.PHONY: install check test bench bench-quick clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# The peers (Determined, torchdata, webdataset) and matplotlib, for `make bench` only.
$(COMPARE_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,compare]'
	touch $(COMPARE_STAMP)

install: $(STAMP)

check: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

test: check
	$(PY) -m pytest
	$(MAKE) bench-quick

# The benchmark scripts in quick mode, so that they never rot; speed is reported, not asserted.
bench-quick: $(STAMP)
	$(PY) benchmarks/samplers_table.py --quick
	$(PY) benchmarks/loader_table.py --quick
	$(PY) benchmarks/shuffle_quality.py --quick

bench: $(COMPARE_STAMP)
	$(PY) -m pytest benchmarks --benchmark-only --benchmark-columns=min,median,max,rounds
	$(PY) benchmarks/samplers_table.py --plot docs/samplers.png
	$(PY) benchmarks/loader_table.py
	$(PY) benchmarks/shuffle_quality.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis .benchmarks
