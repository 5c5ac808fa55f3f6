# `make test` on a fresh clone creates .venv, installs detsamplers with its dev extras and
# the peers it is compared with (determined, torchdata, webdataset, grain, litdata, datasets)
# and the training frameworks it integrates with (lightning, accelerate, transformers)
# against constraints.txt
# (the CPU build of torch), and runs ruff, mypy --strict and pytest.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
DOCS_VENV := .venv-docs
DOCS_PY := $(DOCS_VENV)/bin/python
DOCS_STAMP := $(DOCS_VENV)/.installed

MOSAIC_VENV := .venv-mosaic
MOSAIC_STAMP := $(MOSAIC_VENV)/.installed

# Mosaic streaming's own code, unpacked into a folder and imported by no venv: the pinned
# wheel without its dependencies (about 3 MB). tests/webdataset/test_wds_plan_peers.py runs
# its partition and shuffle modules (numpy only) from there, so that `make test` checks
# benchmarks/plan_rules.py against Mosaic's code without .venv-mosaic (`make mosaic`).
MOSAIC_LIB := .mosaic-lib
MOSAIC_LIB_STAMP := $(MOSAIC_LIB)/.installed

.PHONY: install check test bench bench-quick docs clean demo mosaic bench-mosaic nginx

# The kernel's C files, as setup.py globs them (a new one needs no edit here).
KERNEL_C := $(wildcard detsamplers/_kernel*.c)

# setup.py builds the mixture's compiled kernel (detsamplers/_kernel.c) with the C compiler;
# the check after the install fails loudly if it did not build, since the tests compare it
# with the numpy path (a user's install without a compiler falls back to numpy instead).
$(STAMP): pyproject.toml constraints.txt setup.py $(KERNEL_C)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,compare,integrations]'
	# litdata pulls in torchvision, whose only wheel here is built for CUDA torch and fails
	# to load beside the CPU torch 2.13.0 ("operator torchvision::nms does not exist");
	# torchmetrics imports it whenever it is installed, and so does `import lightning`.
	# Nothing here uses it (litdata imports it only for its image helpers): remove it.
	$(PY) -m pip uninstall --quiet --yes torchvision
	$(PY) -c "import sys, detsamplers as ds; s = ds.kernel_status(); print('kernel:', s); sys.exit(s != 'compiled')"
	touch $(STAMP) $(DEMO_STAMP)

# `make demo` needs the package alone (torch, numpy, tqdm): the first install of
# docs/getting-started.md, into the same .venv. The full install above includes it (and
# touches this stamp too), so `make demo` after `make install` installs nothing.
$(DEMO_STAMP): pyproject.toml constraints.txt setup.py $(KERNEL_C)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt -e .
	touch $(DEMO_STAMP)

# `make docs` in a venv of its own with the docs extra only (mkdocs-material, mkdocstrings)
# and detsamplers' own dependencies, not the dev tools and compared peers of .venv.
$(DOCS_STAMP): pyproject.toml constraints.txt setup.py
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_PY) -m pip install --quiet -c constraints.txt -e '.[docs]'
	touch $(DOCS_STAMP)

$(MOSAIC_LIB_STAMP): $(STAMP)
	rm -rf $(MOSAIC_LIB)
	$(PY) -m pip install --quiet --no-deps --target $(MOSAIC_LIB) 'mosaicml-streaming==0.13.0'
	touch $(MOSAIC_LIB_STAMP)

install: $(STAMP) $(MOSAIC_LIB_STAMP)

# Mosaic streaming in a venv of its own (it cannot share .venv with datasets 5): the `mosaic`
# extra, then mosaicml-streaming without its dependencies (torchvision, cloud SDKs).
# benchmarks/peers_table.py runs Mosaic's rows there when it exists (about 5 min to build).
$(MOSAIC_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(MOSAIC_VENV)
	$(MOSAIC_VENV)/bin/python -m pip install --quiet -c constraints.txt -e '.[mosaic]'
	$(MOSAIC_VENV)/bin/python -m pip install --quiet --no-deps 'mosaicml-streaming==0.13.0'
	touch $(MOSAIC_STAMP)

mosaic: $(MOSAIC_STAMP)

# The token-stream peers in a venv of their own (ai2-olmo-core's cached-path needs
# huggingface_hub below 1.0, where datasets 5 in .venv needs 2.x): detsamplers, megatron-core
# (its wheel ships the compiled `helpers_cpp` GPTDataset uses), ai2-olmo-core and litdata,
# against constraints.txt; torchvision removed as in .venv. benchmarks/tokens_peers.py runs there.
TOKENS_VENV := .venv-tokens
TOKENS_STAMP := $(TOKENS_VENV)/.installed
$(TOKENS_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(TOKENS_VENV)
	$(TOKENS_VENV)/bin/python -m pip install --quiet -c constraints.txt -e . \
		'megatron-core==0.16.1' 'ai2-olmo-core==3.0.0' 'litdata==0.2.76'
	$(TOKENS_VENV)/bin/python -m pip uninstall --quiet --yes torchvision
	touch $(TOKENS_STAMP)

.PHONY: tokens-peers bench-tokens
tokens-peers: $(TOKENS_STAMP)

# Token streams against Megatron-Core, OLMo-core and litdata (docs/benchmarks-tokens.md):
# writes about 3.5 GB of corpora under /tmp and removes them; about 20 minutes.
bench-tokens: $(TOKENS_STAMP)
	PYTHONPATH=. $(TOKENS_VENV)/bin/python benchmarks/tokens_peers.py --folder /tmp/detsamplers-tokens-bench

# Debian's nginx-light, for the tests and figures that count the bytes a real web server
# sends (tests/webdataset/nginx_server.py; they fail under CI without it).
nginx:
	command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq nginx-light; }

# Train on 2 ranks (torchrun, gloo on 127.0.0.1), pause midway, resume on 1, verify the batches;
# then SIGTERM one rank of a run and relaunch it with latest_checkpoint="auto".
demo: $(DEMO_STAMP)
	$(PY) -m detsamplers demo

check: $(STAMP) $(MOSAIC_LIB_STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# pytest on PYTEST_WORKERS pytest-xdist workers: most of the slow tiers' time is waiting
# (torchrun rendezvous, servers, pip), which workers overlap on 2 cores; a file's tests stay on
# one worker, the longest files start first (tests/parallel.py). PYTEST_WORKERS=0 runs serially.
# 3 or 4 make no difference here: the same clone on 2 idle cores ran the suite's pytest in
# 404.5 s with 4 workers and 414.9 s with 3, one after the other.
PYTEST_WORKERS ?= 3
XDIST := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# Compiled modules are kept (git-ignored __pycache__) even where PYTHONDONTWRITEBYTECODE is
# set: otherwise every process the suite starts (each torchrun rank, script, CLI and pytest
# run) compiles detsamplers, the examples and the test helpers it imports from source again.
test: check
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest $(XDIST)
	$(MAKE) bench-quick

# The fast tier, before each commit: every test without a slow marker (tests/tiers.py), none
# of which starts a process or a server (the guard fails one that does), and every hypothesis
# property on 10 examples instead of 60, or a sixth of its own max_examples (tests/tiers.py), on
# PYTEST_WORKERS workers. It keeps compiled modules (git-ignored __pycache__) even where
# PYTHONDONTWRITEBYTECODE is set: each worker's collection then takes half the CPU from the second run.
# A file whose every test has a slow marker is not even imported (tests/tiers.py).
# About 4 CPU-minutes: about 2 minutes on 2 idle cores with 2 workers.
.PHONY: test-fast
test-fast: $(STAMP)
	PYTHONDONTWRITEBYTECODE= HYPOTHESIS_PROFILE=fast $(PY) -m pytest $(XDIST) -q -m "not (distributed or frameworks or install or servers or subprocess or workers)"

# The benchmark scripts in quick mode, so that they never rot; speed is reported, not asserted.
bench-quick: $(STAMP)
	$(PY) benchmarks/samplers_table.py --quick
	$(PY) benchmarks/loader_table.py --quick
	$(PY) benchmarks/torchdata_table.py --quick
	$(PY) benchmarks/webdataset_table.py --quick
	$(PY) benchmarks/webdataset_http_table.py --quick
	$(PY) benchmarks/locality_table.py --quick
	$(PY) benchmarks/local_parts_table.py --quick
	$(PY) benchmarks/part_shuffle_quality.py --quick
	$(PY) benchmarks/webdataset_mix_table.py --quick
	$(PY) benchmarks/webdataset_mix_locality.py --quick
	$(PY) benchmarks/shuffle_quality.py --quick
	$(PY) benchmarks/shard_shuffle_table.py --quick
	$(PY) benchmarks/mix_table.py --quick
	$(PY) benchmarks/preemption_table.py --quick
	$(PY) benchmarks/peers_table.py --quick
	$(PY) benchmarks/resume_table.py --quick
	$(PY) benchmarks/testing_table.py --quick
	$(PY) benchmarks/bench_overhead.py --quick
	$(PY) benchmarks/s3_build_table.py --quick
	$(PY) benchmarks/s3_peers_table.py --quick
	$(PY) benchmarks/grow_table.py --quick
	$(PY) benchmarks/framework_resume_table.py --quick
	$(PY) benchmarks/inline_cpu.py --quick
	$(PY) benchmarks/window_reads.py --quick

bench: $(STAMP)
	$(PY) -m pytest benchmarks --benchmark-only --benchmark-columns=min,median,max,rounds
	$(PY) benchmarks/samplers_table.py --plot docs/samplers.png
	$(PY) benchmarks/loader_table.py
	$(PY) benchmarks/torchdata_table.py --plot docs/torchdata.png
	$(PY) benchmarks/webdataset_table.py
	$(PY) benchmarks/webdataset_http_table.py
	$(PY) benchmarks/locality_table.py
	$(PY) benchmarks/local_parts_table.py
	$(PY) benchmarks/part_shuffle_quality.py
	$(PY) benchmarks/webdataset_mix_table.py
	$(PY) benchmarks/webdataset_mix_locality.py
	$(PY) benchmarks/shuffle_quality.py
	$(PY) benchmarks/shard_shuffle_table.py
	$(PY) benchmarks/mix_table.py --plot docs/mix.png
	$(PY) benchmarks/preemption_table.py
	$(PY) benchmarks/peers_table.py --plot-dir docs
	$(PY) benchmarks/resume_table.py
	$(PY) benchmarks/grow_table.py
	$(PY) benchmarks/framework_resume_table.py
	$(PY) benchmarks/s3_peers_table.py

# The peers' questions with Mosaic streaming's rows (builds .venv-mosaic first).
bench-mosaic: $(STAMP) $(MOSAIC_STAMP)
	$(PY) benchmarks/peers_table.py --plot-dir docs

# The documentation site, warnings as errors; its examples also run in `make test`.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_PY) -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(DOCS_VENV) $(MOSAIC_VENV) $(MOSAIC_LIB) $(TOKENS_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis .benchmarks
