"""Test configuration: hypothesis without deadlines (the CI machine is small and shared), and
the trial tests' shared run of the demo.

The demo fixture lives here rather than in ``tests/trial/conftest.py``: ``tests/trial`` and
``tests/webdataset`` are not packages, so two ``conftest.py`` files there would both import
as the module ``conftest`` and collide when both folders are collected in one run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from detsamplers.trial._demo import examples_dir, run_demo

# The demo trial and the other runnable examples live in examples/ beside the package: the
# tests import them (``from demo_trial import DemoTrial``), and so do the processes they
# launch (torchrun ranks, scripts), which inherit PYTHONPATH.
EXAMPLES = examples_dir()
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (EXAMPLES, os.environ.get("PYTHONPATH")) if p)

# Remote sources with the default ``parts`` keep a node cache in the default folder,
# ``$XDG_CACHE_HOME/detsamplers/shards``: the tests (and the processes they launch) use a
# folder of their own, never the user's home.
_CACHE_HOME = tempfile.mkdtemp(prefix="detsamplers-tests-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE_HOME
atexit.register(shutil.rmtree, _CACHE_HOME, True)

# The test tiers: the slow markers, set from the fixtures a test uses, and the guard that fails
# a test without one that starts a process or a server (tests/tiers.py); and the opt-in record of
# each test's wall and CPU time (DETSAMPLERS_TEST_CPU=path, tests/cpu_time.py); and which tests
# share a pytest-xdist worker and start first (tests/parallel.py).
pytest_plugins = ["tests.tiers", "tests.cpu_time", "tests.parallel"]

settings.register_profile(
    "default",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=1000)
# `make test-fast`: every law still runs, on 10 examples; a test's own
# @settings(max_examples=n) runs max(10, n / 6) of them there, or n if n <= 10 (tests/tiers.py).
settings.register_profile("fast", parent=settings.get_profile("default"), max_examples=10)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[bool, list[str], Path]:
    """The demo's runs: 2 ranks straight; preempted by SIGTERM after batch 20, then resumed
    on 1 rank (``paused/``) and relaunched on 2 with ``"auto"`` (``sigterm/``); ``reference/``
    holds the straight run's checkpoints, records and ``weights.pt``."""
    work = tmp_path_factory.mktemp("demo")
    lines: list[str] = []
    ok = run_demo(ranks=2, pause_at=20, resume_ranks=1, workdir=str(work), echo=lines.append)
    return ok, lines, work
