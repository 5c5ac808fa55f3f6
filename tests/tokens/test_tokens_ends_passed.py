"""The ends cache's sampled check kept on disk (NOTE [ ends check kept on disk ])."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import count_position_reads
from tokens_helpers import ends_cache_of as cache_of
from tokens_helpers import write_lengths as write

from detsamplers.tokens import TokenCorpus, _boundaries, _corpus, _ends_passed, _remembered

SAMPLED = 100  # the sampled check reads about 130 values; a marked open reads 2


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Files count as settled at once; nothing the process kept in memory."""
    monkeypatch.setattr(_remembered, "RACY_NS", -(10**12))
    forget()
    yield
    forget()


def forget() -> None:
    """What a fresh process starts with: nothing kept in memory."""
    _boundaries._PASSED.clear()
    _corpus._BLOCK_STARTS.clear()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the values the open reads from the ends cache and the sidecar by position."""
    return count_position_reads(monkeypatch)


def opened(path: Path, sidecar: Path, reads: list[int]) -> tuple[list[list[int]], int]:
    """The documents of a fresh open, and the values its open read by position."""
    forget()
    before = sum(reads)
    corpus = TokenCorpus(path, lengths=[sidecar], progress=False)
    read = sum(reads) - before
    return [corpus.document(d).tolist() for d in range(corpus.num_documents)], read


def test_a_fresh_open_of_unchanged_files_skips_the_sampled_check_and_reads_the_same_documents(
    tmp_path: Path, reads: list[int]
) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 2] * 30)
    right, _ = opened(path, sidecar, reads)  # writes the ends cache
    checked, read = opened(path, sidecar, reads)  # checks it, writes the marker
    assert checked == right and read > SAMPLED
    assert _ends_passed.passed_file(cache_of(sidecar)).stat().st_size == _ends_passed.WORDS * 8
    for _ in range(2):
        again, read = opened(path, sidecar, reads)
        assert again == right and read == 2  # the first and last ends only


def later() -> None:
    """Past the coarse clock's tick, so that a write gets a new ``st_ctime_ns``."""
    time.sleep(0.03)


@pytest.mark.parametrize("change", ["sidecar rewritten, stat restored", "token file touched",
                                    "cache rewritten"])  # fmt: skip
def test_a_file_changed_after_a_marked_open_is_checked_again(
    tmp_path: Path, reads: list[int], change: str
) -> None:
    lengths = list(range(1, 202))
    path, sidecar = write(tmp_path, lengths)
    opened(path, sidecar, reads)
    opened(path, sidecar, reads)  # marks it
    later()
    expected = lengths
    if change == "sidecar rewritten, stat restored":  # same size, same st_mtime_ns
        before = os.stat(sidecar)
        expected = [lengths[0], *reversed(lengths[1:])]
        np.save(sidecar, np.array(expected, dtype=np.uint32))
        os.utime(sidecar, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif change == "token file touched":
        os.utime(path)
    else:  # the same bytes written again in its place
        cache_of(sidecar).write_bytes(cache_of(sidecar).read_bytes())
    found, read = opened(path, sidecar, reads)
    assert [len(document) for document in found] == expected
    assert read > SAMPLED


def test_the_marker_of_another_corpus_is_ignored(tmp_path: Path, reads: list[int]) -> None:
    one, one_side = write(tmp_path / "one", [2, 5, 1] * 40)
    other, other_side = write(tmp_path / "other", [5, 2, 1] * 40)
    for path, sidecar in ((one, one_side), (other, other_side)):
        opened(path, sidecar, reads)
    opened(one, one_side, reads)  # marks one's cache
    shutil.copy(_ends_passed.passed_file(cache_of(one_side)),
                _ends_passed.passed_file(cache_of(other_side)))  # fmt: skip
    found, read = opened(other, other_side, reads)
    assert [len(document) for document in found] == [5, 2, 1] * 40 and read > SAMPLED


def spoil_values(marker: Path, at: int, value: int) -> None:
    values = np.frombuffer(marker.read_bytes(), dtype="<i8").copy()
    values[at] = value
    marker.write_bytes(values.tobytes())


SPOILS: dict[str, Callable[[Path], object]] = {
    "junk": lambda marker: marker.write_bytes(b"x" * (_ends_passed.WORDS * 8)),
    "truncated": lambda marker: marker.write_bytes(marker.read_bytes()[:-8]),
    "padded": lambda marker: marker.write_bytes(marker.read_bytes() + b"\0" * 8),
    "another version": lambda marker: spoil_values(marker, 1, 2),
    "another count": lambda marker: spoil_values(marker, 2, 7),
    "a folder": lambda marker: (marker.unlink(), marker.mkdir()),
    "a fifo": lambda marker: (marker.unlink(), os.mkfifo(marker)),
}


@pytest.mark.parametrize("spoil", list(SPOILS))
def test_a_stale_malformed_or_hostile_marker_is_ignored_and_the_cache_checked(
    tmp_path: Path, reads: list[int], spoil: str
) -> None:
    path, sidecar = write(tmp_path, [4, 1, 3] * 40)
    right, _ = opened(path, sidecar, reads)
    opened(path, sidecar, reads)
    SPOILS[spoil](_ends_passed.passed_file(cache_of(sidecar)))
    found, read = opened(path, sidecar, reads)  # a FIFO: no hang (opened without blocking)
    assert found == right and read > SAMPLED


def test_a_marked_cache_whose_last_end_is_not_the_token_count_is_rebuilt(
    tmp_path: Path, reads: list[int]
) -> None:
    path, sidecar = write(tmp_path, [4, 1, 3] * 40)
    right, _ = opened(path, sidecar, reads)
    opened(path, sidecar, reads)
    cache = cache_of(sidecar)
    stored = np.load(cache)
    stored[-1] += 5  # past the file's tokens
    with cache.open("r+b") as handle:  # in place: the marker's identity of it is kept
        handle.seek(-8, os.SEEK_END)
        handle.write(stored[-1:].tobytes())
    os.utime(cache, ns=(os.stat(cache).st_atime_ns, os.stat(cache).st_mtime_ns))
    marker = _ends_passed.passed_file(cache)
    spoil_values(marker, -1, os.stat(cache).st_ctime_ns)  # the forger's marker, bound anew
    found, _ = opened(path, sidecar, reads)
    assert found == right


@settings(max_examples=20, deadline=None)
@given(values=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=_ends_passed.WORDS + 2))
def test_a_marker_passes_only_for_the_exact_values_of_the_files(
    tmp_path_factory: pytest.TempPathFactory, values: list[int]
) -> None:
    folder = tmp_path_factory.mktemp("marker")
    cache = folder / "t.ends.npy"
    seen = [tuple(range(5 * i, 5 * i + 5)) for i in range(3)]
    _ends_passed.store_passed(cache, 9, seen)
    assert _ends_passed.passed(cache, 9, seen)
    assert not _ends_passed.passed(cache, 8, seen)
    _ends_passed.passed_file(cache).write_bytes(np.array(values, dtype="<i8").tobytes())
    expected = [0x6465747061737331, 1, 9, *range(15)]
    assert _ends_passed.passed(cache, 9, seen) == (values == expected)
