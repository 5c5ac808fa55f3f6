"""The cached document ends of a lengths sidecar: written once, checked, stale or forged ones."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import ends_cache_of as cache_of
from tokens_helpers import write_lengths as write

from detsamplers.tokens import TokenCorpus, TokenSequences, _boundaries

HEADER = _boundaries.ENDS_HEADER


@pytest.fixture
def sums(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the sums of a sidecar's lengths (each open that did not use a cache)."""
    calls: list[int] = []
    real = _boundaries.ends_of_lengths

    def counted(*args: object) -> object:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_boundaries, "ends_of_lengths", counted)
    return calls


def documents(corpus: TokenCorpus) -> list[list[int]]:
    return [corpus.document(d).tolist() for d in range(corpus.num_documents)]


def open_corpus(path: Path, sidecar: Path, cache: bool = True) -> TokenCorpus:
    return TokenCorpus(path, lengths=[sidecar], cache=cache)


def test_a_sidecars_ends_are_cached_beside_it_once_and_memory_mapped_by_later_opens(
    tmp_path: Path, sums: list[int]
) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 2])
    first = open_corpus(path, sidecar)
    assert len(sums) == 1 and cache_of(sidecar).is_file()
    stored = np.load(cache_of(sidecar), allow_pickle=False)
    assert stored[HEADER:].tolist() == [3, 4, 8, 10]
    second = open_corpus(path, sidecar)
    assert len(sums) == 1  # the second open summed nothing
    ends = second._ends[0]
    assert isinstance(ends.base, np.memmap) or isinstance(ends.base.base, np.memmap)
    assert documents(second) == documents(first) == [[1, 2, 3], [4], [5, 6, 7, 8], [9, 10]]
    # cache=False neither reads the cache nor writes one.
    cache_of(sidecar).unlink()
    assert documents(open_corpus(path, sidecar, cache=False)) == documents(first)
    assert len(sums) == 2 and not cache_of(sidecar).exists()


def test_a_cache_copied_from_another_sidecar_is_rebuilt_even_with_the_same_token_count(
    tmp_path: Path, sums: list[int]
) -> None:
    path, sidecar = write(tmp_path / "a", [3, 1, 4, 2])
    other_path, other = write(tmp_path / "b", [2, 4, 1, 3])
    open_corpus(path, sidecar)
    open_corpus(other_path, other)
    cache_of(other).write_bytes(cache_of(sidecar).read_bytes())  # 10 tokens, 4 documents too
    assert len(sums) == 2
    corpus = open_corpus(other_path, other)
    assert len(sums) == 3  # refused by its binding: summed again, and rewritten
    assert documents(corpus) == [[1, 2], [3, 4, 5, 6], [7], [8, 9, 10]]
    assert np.load(cache_of(other))[HEADER:].tolist() == [2, 6, 7, 10]


def test_a_truncated_or_shortened_cache_is_rebuilt(tmp_path: Path, sums: list[int]) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 2])
    open_corpus(path, sidecar)
    whole = cache_of(sidecar).read_bytes()
    cache_of(sidecar).write_bytes(whole[:-5])  # shorter than its header says
    assert documents(open_corpus(path, sidecar))[2] == [5, 6, 7, 8]
    assert len(sums) == 2 and cache_of(sidecar).read_bytes() == whole
    stored = np.load(cache_of(sidecar))
    np.save(cache_of(sidecar), stored[:-1])  # a sound .npy with one end too few
    assert documents(open_corpus(path, sidecar))[3] == [9, 10]
    assert len(sums) == 3 and cache_of(sidecar).read_bytes() == whole


def test_a_rewritten_sidecar_of_the_same_size_makes_its_cache_stale(
    tmp_path: Path, sums: list[int]
) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 2])
    open_corpus(path, sidecar)
    before = os.stat(sidecar).st_mtime_ns
    np.save(sidecar, np.array([1, 3, 2, 4], dtype=np.uint32))
    os.utime(sidecar, ns=(before + 10**9,) * 2)  # a later write, whatever the clock's grain
    assert documents(open_corpus(path, sidecar)) == [[1], [2, 3, 4], [5, 6], [7, 8, 9, 10]]
    assert len(sums) == 2


def forge(sidecar: Path, true: np.ndarray, at: int, shift: int) -> None:
    """Rewrite the cache with its true binding and the end ``at`` moved by ``shift``."""
    stored = true.copy()
    stored[HEADER + at] += shift
    np.save(cache_of(sidecar), stored)


def test_a_wrong_middle_is_detected_when_it_breaks_the_increase_and_never_read_past_the_file(
    tmp_path: Path, sums: list[int]
) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 2])
    open_corpus(path, sidecar)
    true = np.load(cache_of(sidecar))
    for at, shift in [(1, -1), (1, 5), (2, 3), (0, 1)]:  # equal, or beyond the next end
        forge(sidecar, true, at, shift)
        assert documents(open_corpus(path, sidecar)) == [[1, 2, 3], [4], [5, 6, 7, 8], [9, 10]]
    assert len(sums) == 5


def test_a_wrong_middle_that_still_increases_is_caught_on_a_sample_or_gives_a_valid_partition(
    tmp_path: Path, sums: list[int]
) -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(2, 9, size=300).tolist()
    path, sidecar = write(tmp_path, lengths)
    tokens = np.arange(1, sum(lengths) + 1).tolist()
    right = documents(open_corpus(path, sidecar))
    true = np.load(cache_of(sidecar))
    caught = used = 0
    for at in range(1, len(lengths) - 1):
        forge(sidecar, true, at, -1)  # every length is at least 2: the ends still increase
        got = documents(open_corpus(path, sidecar))
        again = documents(open_corpus(path, sidecar)) if got != right else got
        if got == right:
            caught += 1
            continue
        # Not detected: the ends still split the file's tokens into non-empty documents,
        # only around the forged end, and every process that opens it decides the same.
        used += 1
        assert again == got and [t for d in got for t in d] == tokens
        assert all(got[d] == right[d] for d in range(len(right)) if d not in (at, at + 1))
        forge(sidecar, true, at, 0)  # the true cache back for the next position
    assert caught + used == len(lengths) - 2
    # A moved end changes two lengths: a sample at either catches it.
    assert 0 < caught <= 2 * _boundaries.ENDS_SAMPLES and used > 0


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=2, max_size=40),
       at=st.integers(0, 39), value=st.integers(-(2**62), 2**62))  # fmt: skip
def test_any_forged_end_gives_the_true_documents_or_a_partition_of_the_file(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], at: int, value: int
) -> None:
    path, sidecar = write(tmp_path_factory.mktemp("f"), lengths)
    right = documents(open_corpus(path, sidecar))
    stored = np.load(cache_of(sidecar))
    stored[HEADER + at % len(lengths)] = value
    np.save(cache_of(sidecar), stored)
    corpus = open_corpus(path, sidecar)
    got = documents(corpus)
    assert got == right or (
        [t for d in got for t in d] == np.arange(1, sum(lengths) + 1).tolist()
        and all(len(d) >= 1 for d in got)
    )
    sequences = TokenSequences(corpus, 1, mode="concat", seed=0, block_documents=2)
    seen = [sequences.at(k)["input_ids"].tolist() for k in range(len(sequences))]
    assert len(seen) == sum(lengths) // 2  # reads stay inside the file


def test_a_directory_or_fifo_in_the_caches_place_is_ignored_and_left(
    tmp_path: Path, sums: list[int]
) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 2])
    cache_of(sidecar).mkdir()  # a read-only place: the ends stay in memory
    for _ in range(2):
        assert documents(open_corpus(path, sidecar))[0] == [1, 2, 3]
    assert len(sums) == 2 and cache_of(sidecar).is_dir()
    cache_of(sidecar).rmdir()
    os.mkfifo(cache_of(sidecar))  # opening it would block: it is never opened
    assert documents(open_corpus(path, sidecar))[1] == [4]
    assert len(sums) == 3


def unsampled(sidecar: Path, n: int, every: int = 1) -> int:
    """A position (a multiple of ``every``, less 1) whose end and the next the open's
    sampled checks do not read."""
    binding = np.load(cache_of(sidecar))[:HEADER]
    key = np.random.SeedSequence([int(v) & 0xFFFFFFFF for v in binding[1:]] + [n])
    drawn = np.random.default_rng(key).integers(1, n, size=_boundaries.ENDS_SAMPLES)
    sampled = set(drawn.tolist())
    return next(at for at in range(n // 2 + every - 1, n - 2, every) if not {at, at + 1} & sampled)


def test_a_large_caches_increase_is_checked_per_region_when_read_and_a_break_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sums: list[int]
) -> None:
    import detsamplers.tokens._ends_check as ends_check

    monkeypatch.setattr(_boundaries, "CHECK_WHOLE", 4)  # lazily above 4 ends,
    monkeypatch.setattr(ends_check, "CHECK_REGION", 4)  # in regions of 4
    n = 400
    path, sidecar = write(tmp_path, [2] * n)
    right = documents(open_corpus(path, sidecar))
    true = np.load(cache_of(sidecar))
    corpus = open_corpus(path, sidecar)
    check = corpus._checks[0]
    assert not check.complete and len(sums) == 1  # opened from the cache, nothing checked
    assert corpus.document(5).tolist() == right[5]
    assert np.flatnonzero(check._done).tolist() == [1]  # only document 5's region
    assert documents(corpus) == right and check.complete
    # An end past the next one: the open passes, a read of its region names the file.
    at = unsampled(sidecar, n)
    forge(sidecar, true, at, 3)
    corpus = open_corpus(path, sidecar)
    assert corpus.document(3).tolist() == right[3] and len(sums) == 1
    first = (at + 1) // 4 * 4 - 1
    with pytest.raises(ValueError, match=r"document ends cache .*t\.lengths\.npy\.ends\.npy "
                       rf"should hold increasing ends in \[1, {2 * n}\], but its ends "
                       rf"{first} to {first + 4} do not; delete it"):  # fmt: skip
        corpus.document(at + 1)
    with pytest.raises(ValueError, match="should hold increasing ends"):
        TokenSequences(corpus, 3, mode="chunk").at((2 * at + 2) // 4)  # meets document at + 1
    # concat's block starts are read at build, checked among themselves: a block's last
    # end (the next block's start) moved past the next block's.
    forge(sidecar, true, unsampled(sidecar, n, every=4), 9)
    corpus = open_corpus(path, sidecar)
    assert len(sums) == 1
    with pytest.raises(ValueError, match="should hold increasing ends"):
        TokenSequences(corpus, 3, mode="concat", block_documents=4)


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=9, max_size=40),
       at=st.integers(0, 39), value=st.integers(-(2**62), 2**62))  # fmt: skip
def test_a_large_caches_forged_end_gives_the_true_documents_a_partition_or_an_error_naming_it(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], at: int, value: int
) -> None:
    import detsamplers.tokens._ends_check as ends_check

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_boundaries, "CHECK_WHOLE", 4)
        patch.setattr(ends_check, "CHECK_REGION", 4)
        path, sidecar = write(tmp_path_factory.mktemp("f"), lengths)
        right = documents(open_corpus(path, sidecar))
        stored = np.load(cache_of(sidecar))
        stored[HEADER + at % len(lengths)] = value
        np.save(cache_of(sidecar), stored)
        try:
            corpus = open_corpus(path, sidecar)
            got = documents(corpus)
            sequences = TokenSequences(corpus, 1, mode="concat", seed=0, block_documents=2)
            seen = [sequences.at(k)["input_ids"].tolist() for k in range(len(sequences))]
        except ValueError as error:
            assert "ends.npy should hold increasing ends" in str(error)
            return
    assert got == right or (
        [t for d in got for t in d] == np.arange(1, sum(lengths) + 1).tolist()
        and all(len(d) >= 1 for d in got)
    )
    assert len(seen) == sum(lengths) // 2  # reads stay inside the file
