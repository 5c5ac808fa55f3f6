"""The test tiers: the fast tier starts no process and no server, and cannot do so silently."""

from __future__ import annotations

import itertools
import multiprocessing
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import tiers

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
# The tiers' plugin, without pytest-benchmark (which asks git for the commit as it loads).
PLUGINS = ("-p", "tests.tiers", "-p", "no:benchmark")
MARKERS = "\n".join(f"    {name}: a slow tier" for name in tiers.SLOW)


def _popen() -> None:
    subprocess.Popen([sys.executable, "-c", "pass"])


def _process() -> None:
    multiprocessing.get_context("spawn").Process(target=print).start()


def _listen() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()


@pytest.mark.parametrize(
    ("start", "what"),
    [
        (_popen, r"started a process \(subprocess\.Popen\)"),
        (_process, r"started a process \(multiprocessing\)"),
        (_listen, r"listened on a socket \(a server\)"),
    ],
    ids=["popen", "multiprocessing", "listen"],
)
def test_a_test_without_a_slow_marker_is_refused_a_process_or_a_server_before_it_starts(
    start: Callable[[], None], what: str
) -> None:
    with tiers.watching("tests/test_x.py::test_y", {"parametrize"}) as found:
        message = rf"^tests/test_x\.py::test_y {what} but has none of the markers \['distributed', "
        with pytest.raises(tiers.UnmarkedSpawnError, match=message):
            start()
    assert len(found) == 1 and "mark it (see tests/tiers.py)" in found[0]


@pytest.mark.parametrize("marker", tiers.SLOW)
def test_a_test_with_any_slow_marker_goes_through_the_guard_untouched(marker: str) -> None:
    calls: list[tuple[object, ...]] = []
    guarded = tiers._guarded("ran", lambda *args: calls.append(args))
    with tiers.watching("t", {marker}) as found:
        guarded(1, 2)
    with tiers.watching("t", set()), pytest.raises(tiers.UnmarkedSpawnError, match=r"^t ran but"):
        guarded(3)
    assert calls == [(1, 2)] and found == []


def test_every_way_to_start_a_process_or_a_server_is_guarded() -> None:
    import multiprocessing.process
    import os

    for owner, name in [
        (subprocess.Popen, "__init__"),
        (multiprocessing.process.BaseProcess, "start"),
        (socket.socket, "listen"),
        (os, "fork"),
        (os, "posix_spawn"),
        (os, "posix_spawnp"),
    ]:
        assert hasattr(getattr(owner, name), "__wrapped__"), (owner, name)


def test_a_test_that_catches_the_guards_error_and_goes_on_still_fails(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(f"[pytest]\nmarkers =\n{MARKERS}\n")
    pytester.makepyfile(
        """
        import subprocess, sys

        def test_swallows():
            try:
                subprocess.run([sys.executable, "-c", "pass"])
            except Exception:
                pass

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest_inprocess(*PLUGINS, "--strict-markers")
    result.assert_outcomes(passed=1, failed=1)
    swallowed = "*test_swallows started a process (subprocess.Popen) but has none of the markers*"
    result.stdout.fnmatch_lines([swallowed])


def test_a_test_using_a_server_fixture_even_through_another_is_marked_and_left_out_of_the_fast_tier(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(f"[pytest]\nmarkers =\n{MARKERS}\n")
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def s3_session():
            return "a server"

        @pytest.fixture
        def bucket(s3_session):
            return s3_session

        @pytest.fixture
        def demo():
            return "torchrun"
        """
    )
    pytester.makepyfile(
        """
        def test_direct(s3_session): pass
        def test_through(bucket): pass
        def test_demo(demo): pass
        def test_plain(): pass
        """
    )
    args = (*PLUGINS, "--strict-markers", "--collect-only", "-q", "-m")
    fast = pytester.runpytest_inprocess(*args, tiers.FAST)
    fast.stdout.fnmatch_lines(["*::test_plain", "1/4 tests collected (3 deselected)*"])
    servers = pytester.runpytest_inprocess(*args, "servers")
    servers.stdout.fnmatch_lines(["*::test_direct", "*::test_through", "2/4 tests collected*"])
    distributed = pytester.runpytest_inprocess(*args, "distributed")
    distributed.stdout.fnmatch_lines(["*::test_demo", "1/4 tests collected*"])


def test_make_test_fast_deselects_every_slow_marker_and_make_test_deselects_none() -> None:
    makefile = (ROOT / "Makefile").read_text()
    fast = re.search(r"^test-fast:.*\n\t(.*)$", makefile, flags=re.MULTILINE)
    full = re.search(r"^test:.*\n\t(.*)$", makefile, flags=re.MULTILINE)
    assert fast is not None and full is not None
    command = f'HYPOTHESIS_PROFILE=fast $(PY) -m pytest $(XDIST) -q -m "{tiers.FAST}"'
    assert fast.group(1) == "PYTHONDONTWRITEBYTECODE= " + command
    assert full.group(1) == "PYTHONDONTWRITEBYTECODE= $(PY) -m pytest $(XDIST)"
    # Both on pytest-xdist workers, a file per worker (tests/parallel.py); no marker in it.
    xdist = re.search(r"^XDIST := (.*)$", makefile, flags=re.MULTILINE)
    assert xdist is not None
    assert xdist.group(1) == "-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder"
    assert tiers.FAST == (
        "not (distributed or frameworks or install or servers or subprocess or workers)"
    )


def test_every_slow_marker_is_registered_with_a_description() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    registered = dict(re.findall(r'^    "(\w+): (.+)",$', pyproject, flags=re.MULTILINE))
    assert set(tiers.SLOW) <= registered.keys()
    assert all(len(registered[name]) > 20 for name in tiers.SLOW)


def test_the_fast_profile_runs_every_property_on_a_sixth_of_the_examples() -> None:
    from hypothesis import settings

    fast, default = settings.get_profile("fast"), settings.get_profile("default")
    assert (fast.max_examples, default.max_examples) == (10, 60)
    assert fast.deadline is None and fast.suppress_health_check == default.suppress_health_check


def test_a_case_with_workers_above_zero_is_marked_and_its_zero_case_stays_fast(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini(f"[pytest]\nmarkers =\n{MARKERS}\n")
    pytester.makepyfile(
        """
        import pytest
        from detsamplers.testing import Config

        @pytest.mark.parametrize("num_workers", [0, 2])
        def test_loader(num_workers): pass

        @pytest.mark.parametrize("workers", [0, True, 1])
        def test_handed(workers): pass

        @pytest.mark.parametrize("run", [Config(), Config(num_workers=2)], ids=["main", "two"])
        def test_kit(run): pass
        """
    )
    args = (*PLUGINS, "--strict-markers", "--collect-only", "-q", "-m", "workers")
    result = pytester.runpytest_inprocess(*args)
    result.stdout.fnmatch_lines(
        ["*::test_loader?2?", "*::test_handed?1?", "*::test_kit?two?", "3/7 tests collected*"]
    )


@pytest.mark.parametrize("profile", ["fast", "default"])
def test_the_fast_profile_runs_a_sixth_of_a_propertys_own_examples_and_the_default_all_of_them(
    pytester: pytest.Pytester, profile: str
) -> None:
    from hypothesis import settings

    pytester.makepyfile(
        """
        import pytest
        from hypothesis import given, settings, strategies as st

        def note(name):
            with open("runs.txt", "a") as runs:
                runs.write(name + "\\n")

        @settings(max_examples=120, database=None)
        @given(st.integers())
        def test_own_120(x): note("own_120")

        @pytest.mark.parametrize("case", ["a", "b"])
        @settings(max_examples=30, database=None)
        @given(st.integers())
        def test_own_30(case, x): note("own_30_" + case)

        @settings(max_examples=4, database=None)
        @given(st.integers())
        def test_own_4(x): note("own_4")

        @settings(database=None)
        @given(st.integers())
        def test_profiles(x): note("profiles")
        """
    )
    previous = settings.get_current_profile_name()
    settings.load_profile(profile)
    try:
        result = pytester.runpytest_inprocess(*PLUGINS)
    finally:
        settings.load_profile(previous)
    result.assert_outcomes(passed=5)
    runs = (pytester.path / "runs.txt").read_text().split()
    counts = {name: runs.count(name) for name in sorted(set(runs))}
    if profile == "fast":  # 120 / 6; 30 / 6 is below the floor of 10, once per case
        expected = {"own_120": 20, "own_30_a": 10, "own_30_b": 10, "own_4": 4, "profiles": 10}
    else:
        expected = {"own_120": 120, "own_30_a": 30, "own_30_b": 30, "own_4": 4, "profiles": 60}
    assert counts == expected
    assert [tiers.fast_examples(n) for n in (1, 10, 11, 60, 61, 300)] == [1, 10, 10, 10, 11, 50]


def test_a_file_whose_every_test_is_slow_is_not_imported_by_the_fast_tier_and_collected_by_all(
    pytester: pytest.Pytester,
) -> None:
    # Each file appends its name to imported.txt when imported: the fast tier must not import
    # test_slow_only.py at all, must import and run the fast half of test_half.py, and a run
    # without -m (make test) collects both whole.
    pytester.makeini(f"[pytest]\nmarkers =\n{MARKERS}\n")
    record = "open('imported.txt', 'a').write(__name__ + chr(10))\n"
    pytester.makepyfile(
        test_slow_only=record
        + """
import pytest
pytestmark = pytest.mark.frameworks
slow = pytest.mark.servers
@slow
def test_a(): pass
def test_b(http_server): pass
class TestC:
    def test_d(self): pass
""",
        test_half=record
        + """
import pytest
@pytest.mark.servers
def test_slow(): pass
def test_fast(): pass
""",
    )
    pytester.makeconftest("import pytest\n@pytest.fixture\ndef http_server(): pass\n")
    imported = pytester.path / "imported.txt"
    fast = pytester.runpytest_inprocess(*PLUGINS, "--strict-markers", "-m", tiers.FAST)
    fast.assert_outcomes(passed=1, deselected=1)
    assert imported.read_text().split() == ["test_half"]
    imported.unlink()
    everything = pytester.runpytest_inprocess(*PLUGINS, "--strict-markers")
    everything.assert_outcomes(passed=5)
    assert sorted(imported.read_text().split()) == ["test_half", "test_slow_only"]


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (
            "import pytest\n@pytest.mark.servers\ndef test_a(): pass\ndef test_b(): pass\n",
            "one test",
        ),
        ("import pytest\npytestmark = pytest.mark.servers\nfrom x import test_a\n", "an import"),
        ("import pytest\npytestmark = pytest.mark.servers\ntest_a = print\n", "an assignment"),
        ('"""\n>>> 1\n1\n"""\nimport pytest\npytestmark = pytest.mark.servers\n', "a doctest"),
        ("import pytest\npytestmark = pytest.mark.servers\n", "no test"),
        ("def test_a(:\n", "a syntax error"),
        ("from hypothesis import given\n@given(served=None)\ndef test_a(served): pass\n", "drawn"),
    ],
)
def test_a_file_that_may_hold_a_fast_test_is_collected(source: str, why: str) -> None:
    markers = tiers.sure_markers(source)
    assert markers is None or not tiers.deselects(tiers.FAST, markers), why


@given(
    carried=st.sets(st.sampled_from([*tiers.SLOW, "parametrize", "filterwarnings"])),
    expression=st.sampled_from(
        [
            tiers.FAST,
            "servers",
            "not servers",
            "servers and not workers",
            "not (a or b)",
            "x or not y",
        ]
    ),
)
def test_a_file_is_left_out_only_when_every_marker_set_a_test_may_add_is_deselected(
    carried: set[str], expression: str
) -> None:
    # The law of deselects(): True only if -m rejects the markers with any extra markers added.
    from _pytest.mark.expression import Expression

    compiled = Expression.compile(expression)
    extras = [set(), {"a"}, {"b"}, {"x"}, {"y"}, {"workers"}, {"servers"}, {"a", "b", "x", "y"}]
    selected = [
        compiled.evaluate(lambda name, /, m=more, **kw: name in carried | m) for more in extras
    ]
    if tiers.deselects(expression, frozenset(carried)):
        assert not any(selected)
    else:  # collected: some marker set with these markers is selected
        names = sorted({*carried, "a", "b", "x", "y", "workers", "servers"})
        assert any(
            compiled.evaluate(lambda name, /, c=chosen, **kw: name in c)
            for k in range(len(names) + 1)
            for chosen in itertools.combinations(names, k)
            if carried <= set(chosen)
        )
