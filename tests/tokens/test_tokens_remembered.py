"""Facts of unchanged files kept for the next open (NOTE [ facts of unchanged files ])."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import count_position_reads
from tokens_helpers import ends_cache_of as cache_of
from tokens_helpers import write_lengths as write

from detsamplers.tokens import (
    TokenCorpus,
    TokenSequences,
    _boundaries,
    _concat,
    _corpus,
    _pack,
    _pack_recall,
    _remembered,
)
from detsamplers.tokens import _ends_check as ends_check

HEADER = _boundaries.ENDS_HEADER


def forget() -> None:
    """Every store emptied: the next open computes everything again."""
    for store in (_boundaries._PASSED, _corpus._BLOCK_STARTS, _pack_recall._WINDOWS):
        store.clear()


def settled(patch: pytest.MonkeyPatch) -> None:
    """Files count as old enough to be remembered as soon as they are written."""
    patch.setattr(_remembered, "RACY_NS", -(10**12))


def later() -> None:
    """Wait past the coarse clock's tick, so that a write gets a new ``st_ctime_ns``."""
    time.sleep(0.03)


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    forget()
    yield
    forget()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the values the open's sampled check reads from the cache and the sidecar."""
    return count_position_reads(monkeypatch)


@pytest.fixture
def sums(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the sums of a sidecar's lengths (each a rebuild of the cache)."""
    seen: list[int] = []
    real = _boundaries.ends_of_lengths

    def counted(*args: Any) -> Any:
        seen.append(1)
        return real(*args)

    monkeypatch.setattr(_boundaries, "ends_of_lengths", counted)
    return seen


def documents(corpus: TokenCorpus) -> list[list[int]]:
    return [corpus.document(d).tolist() for d in range(corpus.num_documents)]


def test_a_reopened_unchanged_corpus_skips_the_sampled_check_and_reads_the_same_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[int], sums: list[int]
) -> None:
    settled(monkeypatch)
    path, sidecar = write(tmp_path, [3, 1, 4, 2] * 30)
    right = documents(TokenCorpus(path, lengths=[sidecar]))  # writes the cache
    assert sums == [1] and reads == []
    assert documents(TokenCorpus(path, lengths=[sidecar])) == right  # checks and keeps it
    checked = sum(reads)
    assert checked > 100  # the binding, first and last ends, 64 pairs and 65 lengths
    for _ in range(3):
        assert documents(TokenCorpus(path, lengths=[sidecar])) == right
    assert sum(reads) == checked and sums == [1]


@pytest.mark.parametrize("change", ["sidecar rewritten, stat restored", "token file touched",
                                    "cache deleted", "cache replaced"])  # fmt: skip
def test_a_file_changed_after_a_remembered_open_is_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sums: list[int], change: str
) -> None:
    settled(monkeypatch)
    lengths = list(range(1, 202))
    path, sidecar = write(tmp_path, lengths)
    TokenCorpus(path, lengths=[sidecar])  # writes the cache
    TokenCorpus(path, lengths=[sidecar])  # checks and keeps it
    assert sums == [1]
    later()
    expected = lengths
    if change == "sidecar rewritten, stat restored":  # same size, same st_mtime_ns
        before = os.stat(sidecar)
        expected = [lengths[0], *reversed(lengths[1:])]
        np.save(sidecar, np.array(expected, dtype=np.uint32))
        os.utime(sidecar, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif change == "token file touched":
        os.utime(path)
    elif change == "cache deleted":
        cache_of(sidecar).unlink()
    else:  # another file of the same bytes in its place
        cache_of(sidecar).write_bytes(cache_of(sidecar).read_bytes())
    corpus = TokenCorpus(path, lengths=[sidecar])
    assert [len(corpus.document(d)) for d in range(corpus.num_documents)] == expected
    rebuilt = change != "cache replaced"  # a copy of the true cache passes its checks
    assert sums == [1, 1] if rebuilt else sums == [1]


def test_files_written_within_the_clocks_margin_are_not_remembered(
    tmp_path: Path, reads: list[int]
) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 2] * 30)
    TokenCorpus(path, lengths=[sidecar])  # writes the cache
    TokenCorpus(path, lengths=[sidecar])
    checked = sum(reads)
    TokenCorpus(path, lengths=[sidecar])  # all three files younger than RACY_NS
    assert checked > 100 and sum(reads) == 2 * checked


def test_a_remote_or_missing_file_has_no_identities(tmp_path: Path) -> None:
    assert _remembered.identities(["https://example.com/t.bin"]) is None
    assert _remembered.identities([tmp_path / "missing.npy"]) is None
    store = _remembered.Remembered(kept=2)
    for key in range(3):
        store.put(key, key)
    assert [store.get(key) for key in range(3)] == [None, 1, 2]  # bounded, oldest out


def batch(corpus: TokenCorpus, mode: str, ks: list[int]) -> list[list[int]]:
    sequences = TokenSequences(corpus, 7, mode=mode, seed=3, block_documents=4, window=8,
                               outputs=("input_ids", "labels"))  # fmt: skip
    return [row["input_ids"].tolist() for row in sequences.getitems_in_epochs(
        [(1, k % len(sequences)) for k in ks])]  # fmt: skip


def test_a_reopened_concat_order_reads_no_block_start_and_gives_the_same_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settled(monkeypatch)
    path, sidecar = write(tmp_path, ([3, 1, 4, 2, 9, 5] * 20))
    TokenCorpus(path, lengths=[sidecar])  # writes the cache
    right = batch(TokenCorpus(path, lengths=[sidecar]), "concat", [5, 0, 17, 9])
    starts: list[int] = []
    real = _corpus.TokenCorpus.starts

    def counted(self: TokenCorpus, docs: Any, check: bool = True) -> Any:
        starts.append(int(check))
        return real(self, docs, check)

    monkeypatch.setattr(_corpus.TokenCorpus, "starts", counted)
    assert batch(TokenCorpus(path, lengths=[sidecar]), "concat", [5, 0, 17, 9]) == right
    assert 0 not in starts  # no unchecked read: the block starts were kept
    later()
    os.utime(path)  # the token file touched: read again
    assert batch(TokenCorpus(path, lengths=[sidecar]), "concat", [5, 0, 17, 9]) == right
    assert starts.count(0) == 1


def test_a_second_pack_order_over_unchanged_files_packs_no_window_and_the_same_bins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settled(monkeypatch)
    path, sidecar = write(tmp_path, ([3, 1, 4, 2, 9, 5, 12, 6] * 20))
    TokenCorpus(path, lengths=[sidecar])  # writes the cache
    right = batch(TokenCorpus(path, lengths=[sidecar]), "pack", [5, 0, 17, 9])
    packed: list[int] = []
    real = _pack.PackOrder._pack_windows

    def counted(self: Any, ws: list[int]) -> None:
        packed.extend(ws)
        real(self, ws)

    monkeypatch.setattr(_pack.PackOrder, "_pack_windows", counted)
    assert batch(TokenCorpus(path, lengths=[sidecar]), "pack", [5, 0, 17, 9]) == right
    assert packed == []
    later()
    os.utime(sidecar)  # the sidecar touched: its windows packed again
    assert batch(TokenCorpus(path, lengths=[sidecar]), "pack", [5, 0, 17, 9]) == right
    assert len(packed) >= 1


def test_a_kept_window_is_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settled(monkeypatch)
    path, sidecar = write(tmp_path, [3, 1, 4, 2, 9, 5, 12, 6] * 20)
    TokenCorpus(path, lengths=[sidecar])  # writes the cache
    sequences = TokenSequences(TokenCorpus(path, lengths=[sidecar]), 7, mode="pack", window=8)
    assert sequences._pack is not None
    _, docs, *_ = sequences._pack.window(2)
    with pytest.raises(ValueError, match="read-only"):
        docs[0] = 1


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=12, max_size=80),
    mode=st.sampled_from(["chunk", "concat", "pack"]),
    ks=st.lists(st.integers(0, 10**6), min_size=1, max_size=6),
)
def test_remembered_answers_give_the_batches_computed_afresh(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], mode: str, ks: list[int]
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        settled(patch)
        forget()
        path, sidecar = write(tmp_path_factory.mktemp("r"), lengths)
        TokenCorpus(path, lengths=[sidecar])  # writes the cache
        first = batch(TokenCorpus(path, lengths=[sidecar]), mode, ks)  # computes, keeps
        again = batch(TokenCorpus(path, lengths=[sidecar]), mode, ks)  # from what was kept
        forget()
        fresh = batch(TokenCorpus(path, lengths=[sidecar]), mode, ks)
    assert first == again == fresh


def test_a_concat_block_whose_ends_read_do_not_increase_names_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_boundaries, "CHECK_WHOLE", 4)  # checked on read above 4 ends
    monkeypatch.setattr(ends_check, "CHECK_REGION", 4)
    monkeypatch.setattr(_boundaries, "ENDS_SAMPLES", 0)  # a forged middle passes the open
    path, sidecar = write(tmp_path, [2] * 40)
    TokenCorpus(path, lengths=[sidecar])  # writes the cache
    stored = np.load(cache_of(sidecar))
    stored[HEADER + 9] = stored[HEADER + 8]  # document 9 of block 2 (8 to 11) now empty
    np.save(cache_of(sidecar), stored)
    order = _concat.ConcatOrder(TokenCorpus(path, lengths=[sidecar]), 0, 4)
    assert order._stored_lengths(np.array([0, 5])).tolist() == [[2] * 4] * 2
    message = (r"document ends cache .*t\.lengths\.npy\.ends\.npy should hold increasing ends "
               r"in \[1, 80\], but its ends 7 to 11 do not")  # fmt: skip
    with pytest.raises(ValueError, match=message):
        order._stored_lengths(np.array([1, 2]))


def test_the_same_bytes_read_with_another_end_of_document_id_get_their_own_block_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settled(monkeypatch)
    path = tmp_path / "t.bin"
    np.array([5, 0, 4, 9, 0, 6, 4, 0, 7, 7, 4, 0], dtype=np.uint16).tofile(path)
    for _ in range(2):  # the second time from what was kept
        by_zero = TokenCorpus(path, dtype="uint16", eod_id=0, cache=False)
        by_four = TokenCorpus(path, dtype="uint16", eod_id=4, cache=False)
        assert by_zero.num_documents == by_four.num_documents == 4
        assert by_zero.block_starts(2).tolist() == [0, 5, 12]
        assert by_four.block_starts(2).tolist() == [0, 7, 12]
