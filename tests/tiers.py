"""The test tiers: which tests may start processes or servers, and a guard holding the rest to it.

``make test-fast`` runs every test without a slow marker (:data:`SLOW`): no process started
(torchrun, a script, the CLI, a DataLoader worker), no server listening (aiohttp, nginx, moto
S3, the GCS emulator), no framework. ``make test`` (what CI runs) runs them all.

A test gets its marker in one of two ways: automatically at collection (this module is a plugin
that ``tests/conftest.py`` loads), from a fixture it uses (:data:`FIXTURE_MARKERS`) or a
parameter (:data:`WORKER_PARAMETERS`), or written on it (``@pytest.mark.workers``, a module's
``pytestmark``, a docs example's ``<!-- tier: workers -->``). The guard (:func:`install`) makes the
difference: while a test without a slow marker runs (its setup, call and teardown), starting a
process or listening on a socket raises :class:`UnmarkedSpawnError` and fails the test, even if the
code under test swallows the error. So the fast tier cannot start a process silently, and a
new test that does is told which marker it lacks, in every tier.

Under the ``fast`` hypothesis profile (``make test-fast``) this plugin also gives each property
that sets its own ``max_examples`` a sixth of them, never fewer than 10 (:func:`fast_examples`):
every law runs in the fast tier, and every example of it in ``make test``.
"""

from __future__ import annotations

import functools
import math
import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import settings

from detsamplers.testing import Config

# The slow markers (``pyproject.toml`` registers each with its description).
SLOW = ("distributed", "frameworks", "install", "servers", "subprocess", "workers")

# The marker "not (...)" of the fast tier, as ``make test-fast`` passes it to ``-m``.
FAST = "not (" + " or ".join(SLOW) + ")"

# Fixtures that start a server or a process: a test that uses one (directly or through another
# fixture) gets the marker. ``served`` is the nginx fixture of the cache tests, ``nginx_small``
# the session nginx under it.
FIXTURE_MARKERS = {
    "http_server": "servers",
    "s3_session": "servers",
    "gcs_session": "servers",
    "served": "servers",
    "nginx_small": "servers",
    "demo": "distributed",
}


# The fast tier's share of a property's examples: the ``fast`` profile runs 10 where ``default``
# runs 60, and a test that sets its own ``max_examples`` above 10 runs a sixth of them, never
# fewer than 10 (:func:`fast_examples`); its own count at or below 10 holds as written.
FAST_SHARE = 6
FAST_FLOOR = 10


def fast_examples(max_examples: int) -> int:
    """The examples the fast tier runs of a property that sets ``max_examples`` itself."""
    if max_examples <= FAST_FLOOR:
        return max_examples
    return max(FAST_FLOOR, math.ceil(max_examples / FAST_SHARE))


def _scale_examples(item: pytest.Item) -> None:
    """Under the ``fast`` profile, give a property with its own ``max_examples`` its fast share.

    ``@given`` reads the test's settings from ``_hypothesis_internal_use_settings`` when it runs;
    ``tests/test_tiers.py`` pins that this reaches the examples run.
    """
    test = getattr(item, "obj", None)
    test = getattr(test, "__func__", test)  # a method's function
    own = getattr(test, "_hypothesis_internal_use_settings", None)
    if not isinstance(own, settings) or hasattr(test, "_fast_examples_of"):
        return  # not a property, or scaled already (another case of the same function)
    test._fast_examples_of = own.max_examples
    scaled = settings(own, max_examples=fast_examples(own.max_examples))
    test._hypothesis_internal_use_settings = scaled


# A parametrized test whose case has one of these parameters above 0, or a parameter whose
# ``num_workers`` is (a ``detsamplers.testing.Config``), iterates a DataLoader with worker
# processes: that case gets ``workers`` (its ``0`` case stays in the fast tier).
WORKER_PARAMETERS = ("num_workers", "workers")


class UnmarkedSpawnError(RuntimeError):
    """A test without a slow marker started a process or a server."""


# The test running now and what it did wrong, while it has no slow marker (else None).
_unmarked: list[str] | None = None
_test = ""


def _refuse(what: str) -> None:
    if _unmarked is not None:
        message = (
            f"{_test} {what} but has none of the markers {list(SLOW)}: mark it (see tests/tiers.py)"
            " or keep it in-process"
        )
        _unmarked.append(message)
        raise UnmarkedSpawnError(message)


def _guarded(what: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _refuse(what)
        return original(*args, **kwargs)

    return guarded


def install() -> None:
    """Wrap every way this suite starts a process or a server with the guard (once per session)."""
    targets: list[tuple[Any, str, str]] = [
        (subprocess.Popen, "__init__", "started a process (subprocess.Popen)"),
        (multiprocessing.process.BaseProcess, "start", "started a process (multiprocessing)"),
        (socket.socket, "listen", "listened on a socket (a server)"),
        (os, "fork", "forked"),
        (os, "posix_spawn", "started a process (os.posix_spawn)"),
        (os, "posix_spawnp", "started a process (os.posix_spawnp)"),
    ]  # not os.system: a hostile pickle's payload names it (tests/test_cli_inspect.py)
    for owner, name, what in targets:
        original = getattr(owner, name, None)
        if original is not None and not hasattr(original, "__wrapped__"):
            setattr(owner, name, _guarded(what, original))


@contextmanager
def watching(nodeid: str, markers: set[str]) -> Iterator[list[str]]:
    """While a test runs: what it did against its tier (stays empty if it has a slow marker)."""
    global _unmarked, _test
    before = _unmarked, _test
    found: list[str] = []
    _unmarked, _test = (None if markers.intersection(SLOW) else found), nodeid
    try:
        yield found
    finally:
        _unmarked, _test = before


# The plugin (``tests/conftest.py`` loads it with ``pytest_plugins``).
_FOUND = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    install()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    fast = settings.get_current_profile_name() == "fast"
    for item in items:
        if fast:
            _scale_examples(item)
        used = set(getattr(item, "fixturenames", ()))
        for fixture in sorted(used & FIXTURE_MARKERS.keys()):
            item.add_marker(FIXTURE_MARKERS[fixture])
        params = getattr(getattr(item, "callspec", None), "params", {})
        values = [params.get(name) for name in WORKER_PARAMETERS]
        values += [value.num_workers for value in params.values() if isinstance(value, Config)]
        if any(_positive(value) for value in values):
            item.add_marker("workers")


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    with watching(item.nodeid, {mark.name for mark in item.iter_markers()}) as found:
        item.stash[_FOUND] = found
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item,
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    found = item.stash.get(_FOUND, [])
    if found:
        if report.passed:  # the code under test caught the guard's error and went on
            report.outcome = "failed"
            report.longrepr = "\n".join(found)
        found.clear()  # one failed phase per test is enough
    return report
