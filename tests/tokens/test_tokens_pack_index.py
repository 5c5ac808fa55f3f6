"""The pack index's bin counts in the compiled kernel against the numpy build
(NOTE [ compiled pack index ])."""

from __future__ import annotations

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
       kind=st.sampled_from(["npy lengths", "bin uint16", "npy uint32 eod"]))  # fmt: skip
@needs_kernel
def test_the_compiled_index_is_the_numpy_index_for_any_corpus_window_and_length(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    window: int,
    seed: int,
    long: str,
    kind: str,
) -> None:
    folder = tmp_path_factory.mktemp("c")
    if kind == "npy lengths":
        corpus = write_unique(folder, files)
    else:
        corpus = write_documents(folder, files, kind.split()[1], kind.startswith("npy"), seed % 7)
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
    monkeypatch.setattr(_pack_index, "COMPILED_BLOCK", 8)  # blocks of two windows of 4
    reported: list[int] = []
    order = PackOrder(corpus, 6, 0, 4, cache=False, progress=reported.append)
    assert reported == [8, 16, 24, 32, 37]
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
def test_the_kernel_refuses_windows_not_aligned_and_buffers_of_other_sizes() -> None:
    ends = [np.array([2, 5, 9], dtype=np.int64)]
    start, tokens = np.array([0, 3], dtype=np.int64), np.array([9], dtype=np.int64)
    seeds = np.zeros(8, dtype=np.uint64)
    counts = np.zeros(2, dtype=np.int64)
    with pytest.raises(ValueError, match=r"first a multiple of window, not window=2, first=1"):
        kernel.pack_index(ends, start, tokens, seeds, 1, 3, 2, 5, True, counts[:1])
    with pytest.raises(ValueError, match=r"counts should hold 2 items of 8 bytes, not 8 bytes"):
        kernel.pack_index(ends, start, tokens, seeds, 0, 3, 2, 5, True, counts[:1])
    with pytest.raises(ValueError, match=r"doc_start should give the 3 ends of file 0"):
        kernel.pack_index(ends, np.array([0, 4], dtype=np.int64), tokens, seeds, 0, 3, 2, 5,
                          True, counts)  # fmt: skip
    with pytest.raises(ValueError, match=r"capacity should be in \[1, "):
        kernel.pack_index(ends, start, tokens, seeds, 0, 3, 2, 0, True, counts)
    assert kernel.pack_index(ends, start, tokens, seeds, 0, 3, 2, 5, True, counts)[2] == -1
