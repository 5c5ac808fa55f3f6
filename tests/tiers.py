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

A file whose every test carries a marker the ``-m`` expression deselects is not imported at all
(:func:`pytest_ignore_collect`): each ``make test-fast`` worker would otherwise import the slow
tiers' modules (and the frameworks, servers and clients they import) only to deselect their tests.
Which markers a test surely carries is read from the file's syntax (:func:`sure_markers`), without
importing it; a file it cannot read so, or one with a test that may be selected, is collected.

Under the ``fast`` hypothesis profile (``make test-fast``) this plugin also gives each property
that sets its own ``max_examples`` a sixth of them, never fewer than 10 (:func:`fast_examples`):
every law runs in the fast tier, and every example of it in ``make test``.
"""

from __future__ import annotations

import ast
import functools
import itertools
import math
import multiprocessing.process
import os
import re
import socket
import subprocess
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _pytest.mark.expression import Expression
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


# A name of a marker expression (pytest's ``ident``), and the expression's own words.
_IDENT = re.compile(r"(?:\w|:|\+|-|\.|\[|\]|\\|/)+")
_CALLED = re.compile(r"((?:\w|:|\+|-|\.|\[|\]|\\|/)+)\s*\(")
_WORDS = frozenset({"and", "or", "not", "True", "False", "None"})
# Above this many names an expression is not tried in every combination (the file is collected).
_MAX_NAMES = 12


def _mark_names(node: ast.expr, aliases: dict[str, frozenset[str]]) -> frozenset[str] | None:
    """The markers ``node`` applies: ``pytest.mark.x``, ``pytest.mark.x(...)``, an alias, a list.

    None if it is something else (a ``given``, a fixture, a helper's decorator).
    """
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        parts = [_mark_names(item, aliases) for item in node.elts]
        if any(part is None for part in parts):
            return None
        return frozenset().union(*(part for part in parts if part is not None))
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "pytest"
    ):
        return frozenset({node.attr})
    return None


def _test_markers(
    node: ast.FunctionDef | ast.AsyncFunctionDef,
    around: frozenset[str],
    aliases: dict[str, frozenset[str]],
) -> frozenset[str]:
    """The markers each case of test ``node`` surely gets (``around``: its module's, class's)."""
    names = set(around)
    given = False
    for decorator in node.decorator_list:
        names |= _mark_names(decorator, aliases) or set()
        call = decorator.func if isinstance(decorator, ast.Call) else decorator
        given |= isinstance(call, (ast.Name, ast.Attribute)) and "given" in ast.unparse(call)
    if not given:  # a property's arguments are drawn, not fixtures
        arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        names |= {FIXTURE_MARKERS[a.arg] for a in arguments if a.arg in FIXTURE_MARKERS}
    return frozenset(names)


def sure_markers(source: str) -> frozenset[str] | None:
    """The markers every test of a module surely carries, read from its source (not run).

    Counted: the module's ``pytestmark``, a test's or its class's ``@pytest.mark.x`` (or a
    module-level alias of one), and a fixture of :data:`FIXTURE_MARKERS` a test takes as an
    argument. None when the module cannot be read so: it does not parse, has a docstring example
    (``--doctest-modules`` collects it), binds a ``test`` name otherwise than by ``def`` (an
    import, an assignment), or has no test.

    >>> sure_markers("import pytest\\n@pytest.mark.servers\\ndef test_a(): pass\\n")
    frozenset({'servers'})
    >>> sure_markers("def test_a(http_server): pass\\ndef test_b(): pass\\n")
    frozenset()
    """
    if ">>>" in source:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    aliases: dict[str, frozenset[str]] = {}
    module: frozenset[str] = frozenset()
    tests: list[frozenset[str]] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            names = _mark_names(node.value, aliases)
            if isinstance(target, ast.Name) and names is not None:
                if target.id == "pytestmark":
                    module = names
                else:
                    aliases[target.id] = names
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("test"):
                tests.append(_test_markers(node, module, aliases))
        elif isinstance(node, ast.ClassDef):
            if not node.name.startswith("Test"):
                continue
            around = set(module)
            for decorator in node.decorator_list:
                around |= _mark_names(decorator, aliases) or set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if item.name.startswith("test"):
                        tests.append(_test_markers(item, frozenset(around), aliases))
                elif isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "pytestmark" for t in item.targets
                ):
                    return None  # a class's own pytestmark: not read here
        else:
            bound = {
                name
                for sub in ast.walk(node)
                if isinstance(sub, (ast.Name, ast.alias))
                for name in [sub.id if isinstance(sub, ast.Name) else (sub.asname or sub.name)]
            }
            if any(name.startswith(("test", "Test")) for name in bound):
                return None
    if not tests:
        return None
    return frozenset.intersection(*tests)


def deselects(markexpr: str, markers: frozenset[str]) -> bool:
    """Whether ``-m markexpr`` deselects every test that carries ``markers``, whatever else it has.

    >>> deselects(FAST, frozenset({"servers"})), deselects(FAST, frozenset({"parametrize"}))
    (True, False)
    """
    try:
        expression = Expression.compile(markexpr)
    except Exception:  # pytest reports a bad expression itself
        return False
    names = sorted(set(_IDENT.findall(markexpr)) - _WORDS - markers)
    with_arguments = [m for m in _CALLED.findall(markexpr) if m not in _WORDS]
    if len(names) > _MAX_NAMES or with_arguments:
        return False  # too many combinations, or a marker with arguments: collect
    for values in itertools.product((False, True), repeat=len(names)):
        carried = markers | {name for name, value in zip(names, values, strict=True) if value}
        if expression.evaluate(lambda name, /, carried=carried, **kwargs: name in carried):
            return False
    return True


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Do not import a test file whose every test ``-m`` deselects (the fast tier's slow files)."""
    markexpr = config.getoption("markexpr", "") or ""
    if (
        not markexpr
        or collection_path.suffix != ".py"
        or not collection_path.name.startswith("test_")
    ):
        return None
    try:
        source = collection_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    markers = sure_markers(source)
    if markers is None or not deselects(markexpr, markers):
        return None
    return True
