"""The bin orders of many pack windows in one pass (``FeistelPermutation.orders``) against
``FeistelPermutation`` window by window (NOTE [ batched permutations ])."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers._permute import SMALL_DOMAIN, FeistelPermutation

#: Bin counts of one window: 1 (the identity), small domains (8 rounds) and large ones (4).
counts_of = st.one_of(st.integers(1, 600), st.integers(SMALL_DOMAIN - 200, SMALL_DOMAIN + 3000))


@settings(max_examples=60, deadline=None)
@given(
    windows=st.lists(st.tuples(counts_of, st.integers(0, 2**40)), min_size=1, max_size=6),
    key=st.integers(0, 2**64 - 1),
)
def test_the_batched_orders_are_each_windows_keyed_permutation(
    windows: list[tuple[int, int]], key: int
) -> None:
    counts = np.array([c for c, _ in windows], dtype=np.int64)
    got = FeistelPermutation.orders(key, counts, np.array([w for _, w in windows], dtype=np.int64))
    parts = np.split(got, np.cumsum(counts)[:-1])
    for (count, window), part in zip(windows, parts, strict=True):
        expected = FeistelPermutation(count, key).at_epoch(np.arange(count, dtype=np.int64), window)
        assert part.tolist() == expected.tolist()
        assert sorted(part.tolist()) == list(range(count))  # a permutation of the window's bins


def test_no_windows_give_no_orders() -> None:
    empty = np.zeros(0, dtype=np.int64)
    assert FeistelPermutation.orders(3, empty, empty).tolist() == []
