"""The suite on several pytest-xdist workers: which tests share a worker, and which start first.

``make test`` and ``make test-fast`` run ``pytest -n N --dist loadfile --no-loadscope-reorder``
(the Makefile's ``PYTEST_WORKERS``). This plugin (``tests/conftest.py`` loads it) makes two
changes to that:

- the scheduler (``FileGroups``, on the controller) hands out whole files as ``loadfile``
  does, except that the files whose tests use the session's ``demo`` run (:data:`DEMO_FILES`,
  several torchrun launches) go to one worker together, so that the demo runs once; a file's
  module fixtures (a shared torchrun launch, an nginx, written shards) are built once, as in a
  serial run, and two tests of a file never run at once (some look for their processes by name).
  (``--dist loadgroup`` would do it with ``xdist_group`` marks, but pytest-xdist 3.8 writes the
  group into ``item._nodeid``, which pytest 9.2 no longer reads.)
- on each worker, the collection is sorted (stably, the same on every worker) so that the files
  that wait longest are handed out first: the installs, then the frameworks' and distributed
  launches, then the other slow tiers, then the fast tier. A long file handed out last would
  otherwise run alone at the end. A test that uses ``demo`` outside :data:`DEMO_FILES` stops the
  run with the fix.

Session fixtures (the aiohttp, nginx, moto S3 and GCS servers, written shards) are built once per
worker that uses them, each on a free port and under the worker's own ``tmp_path_factory``; and
each worker is a process of its own, so ``tests/conftest.py``'s environment (its
``XDG_CACHE_HOME``) is its own too.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.tiers import FIXTURE_MARKERS

# The files whose tests use the session's ``demo`` fixture: one group, one worker.
DEMO_FILES = frozenset(
    {
        "tests/trial/test_trial_distributed.py",
        "tests/trial/test_trial_failure_distributed.py",
        "tests/trial/test_trial_preemption_distributed.py",
    }
)

# Which files start first: by their tests' slowest marker, then in the order of the collection.
FIRST = ("install", "frameworks", "distributed", "subprocess", "servers", "workers")


def _group(nodeid: str) -> str:
    file = nodeid.split("::")[0]
    return "demo" if file in DEMO_FILES else file


def _markers(item: pytest.Item) -> set[str]:
    names = {mark.name for mark in item.iter_markers()}
    used = set(getattr(item, "fixturenames", ()))
    return names | {FIXTURE_MARKERS[name] for name in used & FIXTURE_MARKERS.keys()}


def _start(item: pytest.Item) -> int:
    markers = _markers(item)
    return next((i for i, name in enumerate(FIRST) if name in markers), len(FIRST))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # a serial run, or xdist's controller
        return
    for item in items:
        if "demo" in getattr(item, "fixturenames", ()) and _group(item.nodeid) != "demo":
            raise pytest.UsageError(
                f"{item.nodeid} uses the demo fixture but its file is not in DEMO_FILES: add it"
                " to tests/parallel.py's DEMO_FILES, so that the demo runs on one worker only"
            )
    # A group starts when its first test's turn comes: the group's earliest start.
    start: dict[str, int] = {}
    for item in items:
        group = _group(item.nodeid)
        start[group] = min(start.get(group, len(FIRST)), _start(item))
    items.sort(key=lambda item: start[_group(item.nodeid)])


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with :data:`DEMO_FILES` as one file (other modes unchanged)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileGroups(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return FileGroups(config, log)
