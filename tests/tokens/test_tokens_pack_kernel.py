"""Best-fit-decreasing of the ``pack`` mode in the compiled kernel against the Python code,
and a batch's windows packed together against one by one (NOTE [ packed sequences ])."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import write_unique

from detsamplers import _native
from detsamplers.tokens._pack import CACHED_WINDOWS, PackOrder, best_fit_decreasing, count_bins

kernel = _native.kernel
needs_kernel = pytest.mark.skipif(kernel is None, reason=_native.kernel_status())

#: Sizes up to a capacity: small ones (many ties between equal rooms) and wide ones.
capacities = st.one_of(st.integers(1, 16), st.integers(17, 10**6))


def sizes_under(capacity: int, decreasing: bool) -> st.SearchStrategy[list[int]]:
    sizes = st.lists(st.integers(0, capacity), max_size=300)
    return sizes.map(lambda s: sorted(s, reverse=True)) if decreasing else sizes


def int64(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(capacity=capacities, decreasing=st.booleans(), data=st.data())
@needs_kernel
def test_the_kernel_places_every_size_in_the_bin_the_python_best_fit_does(
    capacity: int, decreasing: bool, data: st.DataObject
) -> None:
    sizes = data.draw(sizes_under(capacity, decreasing))
    placed = np.full(len(sizes), -1, dtype=np.int64)
    count = kernel.pack_bins(int64(sizes), capacity, placed)
    assert (placed.tolist(), count) == best_fit_decreasing(sizes, capacity)


@settings(max_examples=200, deadline=None)
@given(capacity=capacities, data=st.data())
@needs_kernel
def test_the_kernel_counts_each_window_s_bins_as_count_bins_does(
    capacity: int, data: st.DataObject
) -> None:
    windows = data.draw(st.lists(sizes_under(capacity, decreasing=True), max_size=6))
    sizes = [s for window in windows for s in window]
    bounds = np.cumsum([0, *map(len, windows)]).tolist()
    counts = np.full(len(windows), -1, dtype=np.int64)
    kernel.pack_counts(int64(sizes), int64(bounds), capacity, counts)
    assert counts.tolist() == count_bins(sizes, bounds, capacity)
    assert counts.tolist() == [best_fit_decreasing(w, capacity)[1] for w in windows]


@needs_kernel
def test_the_kernel_refuses_a_size_over_the_capacity_and_bounds_out_of_order() -> None:
    with pytest.raises(ValueError, match=r"sizes should be in \[0, capacity=4\], but size 1 is 5"):
        kernel.pack_bins(int64([3, 5]), 4, np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match=r"bins_out should hold 2 items, like sizes, not 1"):
        kernel.pack_bins(int64([3, 2]), 4, np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError, match=r"bounds should increase inside \[0, 2\], but window 0"):
        kernel.pack_counts(int64([3, 2]), int64([2, 1]), 4, np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError, match=r"capacity should be in \[1, "):
        kernel.pack_bins(int64([0]), 0, np.zeros(1, dtype=np.int64))


def packed(order: PackOrder) -> list[list[tuple[int, int, int, bool]]]:
    """Every sequence's pieces as (document, first token, count, closes) rows."""
    return [list(zip(*(column.tolist() for column in order.pieces(k)), strict=True))
            for k in range(len(order))]  # fmt: skip


#: Corpora of document lengths around the sequence lengths drawn with them.
pack_corpora = st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=30), min_size=1,
                        max_size=3)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(files=pack_corpora, seq_len=st.integers(1, 30), seed=st.integers(0, 2**32),
       window=st.integers(1, 12), long=st.sampled_from(["split", "truncate"]))  # fmt: skip
def test_packing_without_the_kernel_gives_the_same_sequences_and_index(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    window: int,
    long: str,
) -> None:
    corpus = write_unique(tmp_path_factory.mktemp("c"), files)
    runs = []
    for compiled in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            if not compiled:
                patch.setattr(_native, "kernel", None)
            order = PackOrder(corpus, seq_len, seed, window, long, cache=False)
            runs.append((order._cumulative.tolist(), order.stats(), packed(order)))
    assert runs[0] == runs[1]


@settings(max_examples=40, deadline=None)
@given(files=pack_corpora, seq_len=st.integers(1, 30), seed=st.integers(0, 2**32),
       window=st.integers(1, 12), data=st.data())  # fmt: skip
def test_a_batch_s_windows_packed_together_are_those_packed_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    window: int,
    data: st.DataObject,
) -> None:
    corpus = write_unique(tmp_path_factory.mktemp("c"), files)
    alone = PackOrder(corpus, seq_len, seed, window, cache=False)
    together = PackOrder(corpus, seq_len, seed, window, cache=False)
    batch = data.draw(st.lists(st.integers(0, len(alone) - 1), min_size=1, max_size=40))
    together.prepare(batch)
    windows = np.searchsorted(alone._cumulative, batch, side="right") - 1
    distinct = list(dict.fromkeys(windows.tolist()))
    assert list(together._packed) == distinct[-CACHED_WINDOWS:]  # packed before any read
    for k in batch:
        assert [column.tolist() for column in together.pieces(k)] == [
            column.tolist() for column in alone.pieces(k)
        ]
