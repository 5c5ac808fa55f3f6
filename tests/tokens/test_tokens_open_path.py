"""A corpus's open on the resume path: what it builds, and what it still refuses."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tqdm
from tokens_helpers import write_lengths as write

from detsamplers.tokens import TokenCorpus, TokenSequences, _boundaries, _chunk_rows


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the progress bars built (each ``tqdm.tqdm``)."""
    built: list[int] = []
    real = tqdm.tqdm

    def counted(*args: object, **kwargs: object) -> object:
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(tqdm, "tqdm", counted)
    return built


def test_a_corpus_opened_from_a_sidecar_or_its_cache_builds_no_progress_bar(
    tmp_path: Path, bars: list[int]
) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 2])
    for _ in range(2):  # the first open writes the ends cache, the second reads it
        corpus = TokenCorpus(path, lengths=[sidecar])
        assert corpus.document(2).tolist() == [5, 6, 7, 8]
    assert bars == []
    scanned = TokenCorpus(path, eod_id=4, progress=False)  # a scan still has its bar
    assert scanned.num_documents == 2 and len(bars) == 1


def test_a_sidecar_rewritten_in_place_with_its_stat_restored_is_refused_by_the_sampled_lengths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 201 documents; every length but the first moves, the sum and the size stay.
    lengths = list(range(1, 202))
    path, sidecar = write(tmp_path, lengths)
    TokenCorpus(path, lengths=[sidecar])  # writes the cache
    before = os.stat(sidecar)
    changed = [lengths[0], *reversed(lengths[1:])]
    np.save(sidecar, np.array(changed, dtype=np.uint32))
    os.utime(sidecar, ns=(before.st_atime_ns, before.st_mtime_ns))  # the binding matches
    sums: list[int] = []
    real = _boundaries.ends_of_lengths

    def counted(*args: object) -> object:
        sums.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_boundaries, "ends_of_lengths", counted)
    corpus = TokenCorpus(path, lengths=[sidecar])
    assert sums == [1]  # the cache failed its sampled lengths and was rebuilt
    assert [len(corpus.document(d)) for d in range(corpus.num_documents)] == changed


def chunk_batch(path: Path, sidecar: Path, corpus: TokenCorpus) -> list[list[int]]:
    """The ``input_ids`` of sequences 3, 0 and 5 of ``chunk`` at ``L = 3``, as one batch."""
    sequences = TokenSequences(corpus, 3, mode="chunk", outputs=("input_ids", "labels"))
    rows = sequences.getitems_in_epochs([(0, 3), (0, 0), (0, 5)])
    return [row["input_ids"].tolist() for row in rows]


def test_a_chunk_batch_reads_each_window_by_one_read_of_the_mapped_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, sidecar = write(tmp_path, [5, 7, 4, 8])
    corpus = TokenCorpus(path, lengths=[sidecar])
    # The numpy path's reads (the compiled pass reads in C, NOTE [ compiled chunk rows ]).
    monkeypatch.setattr(_chunk_rows, "kernel", None)
    reads: list[int] = []
    real_pread, real_preadv = os.pread, getattr(os, "preadv", None)

    def counted(fd: int, size: int, at: int) -> bytes:
        reads.append(size)
        return real_pread(fd, size, at)

    def counted_v(fd: int, buffers: list[memoryview], at: int) -> int:
        reads.append(sum(memoryview(b).nbytes for b in buffers))
        assert real_preadv is not None
        return int(real_preadv(fd, buffers, at))

    monkeypatch.setattr(os, "pread", counted)
    if real_preadv is not None:  # one preadv straight into the window's row
        monkeypatch.setattr(os, "preadv", counted_v)
    assert chunk_batch(path, sidecar, corpus) == [[13, 14, 15], [1, 2, 3], [21, 22, 23]]
    assert reads == [4 * 4] * 3  # a window of L + 1 uint32 tokens each, nothing else


def test_a_token_file_replaced_after_the_open_is_still_read_as_it_was_opened(
    tmp_path: Path,
) -> None:
    path, sidecar = write(tmp_path, [5, 7, 4, 8])
    corpus = TokenCorpus(path, lengths=[sidecar])
    other = tmp_path / "other.npy"
    np.save(other, np.arange(100, 124, dtype=np.uint32))
    os.replace(other, path)  # another inode under the same name: the map reads the old one
    assert chunk_batch(path, sidecar, corpus) == [[13, 14, 15], [1, 2, 3], [21, 22, 23]]


def test_a_token_file_removed_after_the_open_is_still_read_as_it_was_opened(
    tmp_path: Path,
) -> None:
    path, sidecar = write(tmp_path, [5, 7, 4, 8])
    corpus = TokenCorpus(path, lengths=[sidecar])
    path.unlink()  # the map keeps the file's pages; a read by name would find nothing
    assert chunk_batch(path, sidecar, corpus) == [[13, 14, 15], [1, 2, 3], [21, 22, 23]]


def test_a_token_file_cut_short_after_the_open_is_an_error_naming_it(tmp_path: Path) -> None:
    path, sidecar = write(tmp_path, [5, 7, 4, 8])
    corpus = TokenCorpus(path, lengths=[sidecar])
    with open(path, "r+b") as handle:  # the same inode, shorter: a map would fault
        handle.truncate(128 + 4 * 10)
    with pytest.raises(ValueError, match=rf"token file {path} should hold 16 bytes at byte"):
        chunk_batch(path, sidecar, corpus)


def test_an_empty_lengths_sidecar_gives_the_same_error_with_the_cache_or_without(
    tmp_path: Path,
) -> None:
    path, sidecar = write(tmp_path, [3, 1])
    np.save(sidecar, np.array([], dtype=np.uint32))
    errors = []
    for cache in (True, False):
        with pytest.raises(ValueError) as raised:
            TokenCorpus(path, lengths=[sidecar], cache=cache)
        errors.append(str(raised.value))
    assert errors[0] == errors[1]
    assert errors[0] == (
        f"document lengths file {sidecar} holds no values; write it again beside its token file"
    )
