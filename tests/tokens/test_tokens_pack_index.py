"""The pack index's bin counts in the compiled kernel against the numpy build
(NOTE [ compiled pack index ])."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import ends_cache_of, write_documents, write_lengths, write_unique

from detsamplers import _native
from detsamplers.tokens import TokenCorpus, _boundaries, _pack, _pack_index
from detsamplers.tokens import _ends_check as ends_check
from detsamplers.tokens._pack import PackOrder

kernel = _native.kernel
needs_kernel = pytest.mark.skipif(kernel is None, reason=_native.kernel_status())


def index(order: PackOrder) -> list[int]:
    return [*order._header.tolist(), *order._cumulative.tolist()]


def builds(corpus: TokenCorpus, seq_len: int, seed: int, window: int, long: str) -> list[Any]:
    """The index and stats of the compiled build, the numpy build, and numpy without a kernel."""
    out = []
    for way in ("compiled", "numpy", "python"):
        with pytest.MonkeyPatch.context() as patch:
            if way == "numpy":
                patch.setattr(_pack, "count_compiled", lambda *args: None)
            if way == "python":
                patch.setattr(_native, "kernel", None)
            order = PackOrder(corpus, seq_len, seed, window, long, cache=False)
        out.append((index(order), order.stats()))
    return out


#: Files of document lengths: short ones, ones around the capacities drawn, and long ones.
lengths = st.one_of(st.integers(1, 6), st.integers(1, 40), st.integers(30, 200))
files = st.lists(st.lists(lengths, min_size=1, max_size=60), min_size=1, max_size=3)


@settings(max_examples=120, deadline=None)
@given(files=files, seq_len=st.one_of(st.integers(1, 12), st.integers(13, 300)),
       window=st.one_of(st.integers(1, 4), st.integers(5, 200)), seed=st.integers(0, 2**64 - 1),
       long=st.sampled_from(["split", "truncate"]),
       kind=st.sampled_from(["npy lengths", "bin uint16", "npy uint32 eod", "ends in memory"]),
       run=st.integers(1, 70), positions=st.integers(1, 250))  # fmt: skip
@needs_kernel
def test_the_compiled_index_is_the_numpy_index_for_any_corpus_window_and_length(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    window: int,
    seed: int,
    long: str,
    kind: str,
    run: int,
    positions: int,
) -> None:
    folder = tmp_path_factory.mktemp("c")
    if kind == "npy lengths":
        corpus = write_unique(folder, files)
    elif kind == "ends in memory":  # no cache beside the files: nothing mapped to read by pread
        written = write_documents(folder, files, "uint32", True, seed % 7)
        corpus = TokenCorpus(written.paths, eod_id=0, cache=False, progress=False)
    else:
        corpus = write_documents(folder, files, kind.split()[1], kind.startswith("npy"), seed % 7)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_pack_index, "SCAN_RUN", run)  # runs of ends and passes of any size
        patch.setattr(_pack_index, "PASS_POSITIONS", positions)
        compiled, numpy, python = builds(corpus, seq_len, seed, window, long)
    assert compiled == numpy == python


@pytest.mark.parametrize("long", ["split", "truncate"])
@pytest.mark.parametrize("window", [1, 3, 1000])
@needs_kernel
def test_windows_of_full_pieces_only_count_one_bin_a_piece_as_numpy_does(
    tmp_path: Path, long: str, window: int
) -> None:
    # Every document a multiple of L + 1 = 5: no window has a last piece to best-fit.
    corpus = write_unique(tmp_path, [[5, 10, 15, 5], [20, 5]])
    compiled, numpy, python = builds(corpus, 4, 11, window, long)
    assert compiled == numpy == python
    pieces = 12 if long == "split" else 6
    assert compiled[0][:8][4] == pieces and compiled[1]["padding_tokens"] == 0


@needs_kernel
def test_a_single_document_corpus_packs_into_its_bins(tmp_path: Path) -> None:
    corpus = write_unique(tmp_path, [[7]])
    compiled, numpy, _ = builds(corpus, 2, 5, 4, "split")
    assert compiled == numpy and compiled[1]["sequences"] == 3


@needs_kernel
def test_the_build_reports_progress_block_by_block_up_to_every_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_unique(tmp_path, [[3] * 25, [5] * 12])
    monkeypatch.setattr(_pack_index, "SCAN_RUN", 8)  # runs of 8 ends
    reported: list[int] = []
    order = PackOrder(corpus, 6, 0, 4, cache=False, progress=reported.append)
    assert reported == [8, 16, 24, 25, 33, 37]  # the second file's runs start at its start
    monkeypatch.setattr(_pack_index, "PASS_POSITIONS", 16)  # three passes over the ends
    reported.clear()
    assert index(PackOrder(corpus, 6, 0, 4, cache=False, progress=reported.append)) == index(order)
    assert reported == sorted(reported) and reported[-1] == 37
    monkeypatch.setattr(_native, "kernel", None)
    assert index(PackOrder(corpus, 6, 0, 4, cache=False)) == index(order)


def test_a_large_build_shows_a_bar_and_a_small_one_none(monkeypatch: pytest.MonkeyPatch) -> None:
    with _pack_index.build_bar(10, None) as step:
        assert step is None
    monkeypatch.setattr(_pack_index, "BAR_DOCUMENTS", 5)
    with _pack_index.build_bar(10, None) as step:
        assert step is not None
        step(4)
        step(10)
    given_step = [].append
    with _pack_index.build_bar(10, given_step) as step:  # the caller's own progress wins
        assert step is given_step


@needs_kernel
def test_the_numpy_build_runs_where_the_kernel_cannot_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_unique(tmp_path, [[4, 9, 2, 30]])
    over = _pack_index.MAX_CAPACITY + 1
    assert _pack_index.count_compiled(kernel, corpus, 1, 2, over, True) is None
    big = PackOrder(corpus, _pack_index.MAX_CAPACITY, 1, 2, cache=False)  # L + 1 over the bound
    assert big.stats()["sequences"] == 2
    monkeypatch.setattr(corpus, "_ends", [list(corpus._ends[0])])  # ends not an int64 array
    assert _pack_index.count_compiled(kernel, corpus, 1, 2, 5, True) is None


@needs_kernel
def test_a_broken_pair_of_ends_stops_the_compiled_build_naming_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_boundaries, "CHECK_WHOLE", 4)  # checked on read, not at open
    monkeypatch.setattr(ends_check, "CHECK_REGION", 4)
    monkeypatch.setattr(_boundaries, "ENDS_SAMPLES", 0)  # a forged middle passes the open
    path, sidecar = write_lengths(tmp_path, [2] * 400)
    TokenCorpus(path, lengths=[sidecar])
    stored = np.load(ends_cache_of(sidecar))
    stored[_boundaries.ENDS_HEADER + 200] = stored[_boundaries.ENDS_HEADER + 199]  # empty
    np.save(ends_cache_of(sidecar), stored)
    corpus = TokenCorpus(path, lengths=[sidecar])
    cache = re.escape(str(ends_cache_of(sidecar)))
    with pytest.raises(ValueError, match=rf"^document ends cache {cache} should .* 199 to 200"):
        PackOrder(corpus, 8, 0, 16, cache=False)


@needs_kernel
def test_the_kernel_refuses_passes_not_aligned_and_buffers_of_other_sizes() -> None:
    ends, seeds = np.array([2, 5, 9], dtype=np.int64), np.zeros(8, dtype=np.uint64)
    rests, full = np.zeros(3, dtype=np.uint16), np.zeros(2, dtype=np.int64)
    with pytest.raises(
        ValueError, match=r"with lo a multiple of window, .* not window=2, lo=1, hi=3,"
    ):
        kernel.pack_scan(ends, 0, 0, 0, 9, 3, seeds, 1, 3, 2, 5, True, rests[:2], full[:1])
    with pytest.raises(ValueError, match=r"full should hold 2 items of 8 bytes, not 8 bytes"):
        kernel.pack_scan(ends, 0, 0, 0, 9, 3, seeds, 0, 3, 2, 5, True, rests, full[:1])
    with pytest.raises(ValueError, match=r"rests should hold 3 items of 2 bytes .* not 6 bytes of"):
        kernel.pack_scan(ends, 0, 0, 0, 9, 3, seeds, 0, 3, 2, 70_000, True, rests, full)
    with pytest.raises(ValueError, match=r"ends should hold documents of \[0, 3\), not 3 from 1"):
        kernel.pack_scan(ends, 1, 1, 0, 9, 3, seeds, 0, 3, 2, 5, True, rests, full)
    assert kernel.pack_scan(ends, 0, 0, 0, 9, 3, seeds, 0, 3, 2, 5, True, rests, full) == (3, 0, -1)
    assert kernel.pack_scan(ends[::-1].copy(), 0, 0, 0, 9, 3, seeds, 0, 3, 2, 5, True, rests,
                            full)[2] == 1  # fmt: skip
    counts = np.zeros(2, dtype=np.int64)
    with pytest.raises(ValueError, match=r"rests should be below capacity=5, but rest 2 is not"):
        kernel.pack_fit(np.array([1, 4, 5], dtype=np.uint16), full, 2, 5, counts)
    with pytest.raises(ValueError, match=r"capacity in \[1, \d+\], not window=2 and capacity=0"):
        kernel.pack_fit(rests, full, 2, 0, counts)


@needs_kernel
def test_an_ends_cache_that_shrank_while_open_is_named_not_read_past(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_boundaries, "CHECK_WHOLE", 4)  # a cache this large stays mapped
    path, sidecar = write_lengths(tmp_path, [3] * 300)
    TokenCorpus(path, lengths=[sidecar])  # writes the cache, which the next open maps
    corpus = TokenCorpus(path, lengths=[sidecar])
    cache = ends_cache_of(sidecar)
    assert ends_check.mapped_file(corpus._ends[0]) is not None  # read by pread, not the map
    with open(cache, "r+b") as handle:
        handle.truncate(cache.stat().st_size - 800)  # the last 100 ends gone
    name = re.escape(str(cache))
    with pytest.raises(ValueError, match=rf"^file {name} should hold \d+ bytes at byte \d+, but"):
        PackOrder(corpus, 8, 0, 16, cache=False)


@needs_kernel
def test_an_ends_cache_swapped_for_a_fifo_is_named_never_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_boundaries, "CHECK_WHOLE", 4)  # a cache this large stays mapped
    path, sidecar = write_lengths(tmp_path, [3] * 300)
    TokenCorpus(path, lengths=[sidecar])
    corpus = TokenCorpus(path, lengths=[sidecar])
    cache = ends_cache_of(sidecar)
    cache.unlink()  # the map stays; the name is now a FIFO
    os.mkfifo(cache)
    name = re.escape(str(cache))
    with pytest.raises(ValueError, match=rf"^file {name} should be the regular file that was"):
        PackOrder(corpus, 8, 0, 16, cache=False)


@pytest.mark.parametrize("seed", [0, 12345])
@needs_kernel
def test_a_corpus_of_over_65536_documents_counts_as_numpy_does(tmp_path: Path, seed: int) -> None:
    # Past 2**16 documents the document order's network runs four rounds, not eight.
    rng = np.random.default_rng(seed)
    path, sidecar = write_lengths(tmp_path, rng.integers(1, 40, size=70_001).tolist())
    corpus = TokenCorpus(path, lengths=[sidecar])
    compiled, numpy, _ = builds(corpus, 31, seed, 1000, "split")
    assert compiled[0] == numpy[0]
