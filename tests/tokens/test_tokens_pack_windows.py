"""A batch's windows packed by the compiled kernel against the numpy path, and the kernel's
bin orders against ``FeistelPermutation.orders`` (NOTE [ compiled window packing ])."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers import _native
from detsamplers._permute import FeistelPermutation, _round_seeds
from detsamplers.tokens._pack import pack_numpy
from detsamplers.tokens._pack_windows import pack_compiled

kernel = _native.kernel
needs_kernel = pytest.mark.skipif(kernel is None, reason=_native.kernel_status())

#: Small capacities (many equal sizes and rooms), ones a radix digit wide, and wider.
capacities = st.one_of(st.integers(1, 16), st.integers(200, 300), st.integers(65530, 70000))
#: Domains of 8 rounds (below 2**16 values) and the odd large one of 4.
domains = st.one_of(st.integers(1, 600), st.sampled_from([8191, 65535, 65537, 70001]))


@settings(max_examples=150, deadline=None)
@given(counts=st.lists(domains, min_size=1, max_size=6),
       key=st.integers(0, 2**64 - 1), data=st.data())  # fmt: skip
@needs_kernel
def test_the_kernel_s_bin_orders_are_those_of_the_batched_feistel_network(
    counts: list[int], key: int, data: st.DataObject
) -> None:
    epochs = data.draw(st.lists(st.integers(0, 2**62), min_size=len(counts), max_size=len(counts)))
    out = np.full(sum(counts), -1, dtype=np.int64)
    kernel.feistel_orders(np.array(counts, dtype=np.int64), np.array(epochs, dtype=np.int64),
                          _round_seeds(key), out)  # fmt: skip
    expected = FeistelPermutation.orders(key, np.array(counts), np.array(epochs))
    assert out.tolist() == expected.tolist()


@settings(max_examples=300, deadline=None)
@given(capacity=capacities, split=st.booleans(), key=st.integers(0, 2**64 - 1),
       data=st.data())  # fmt: skip
@needs_kernel
def test_the_kernel_packs_a_batch_s_windows_into_the_arrays_of_the_numpy_path(
    capacity: int, split: bool, key: int, data: st.DataObject
) -> None:
    span = data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=8))
    lengths = data.draw(st.lists(st.one_of(st.integers(1, capacity), st.integers(1, 3 * capacity)),
                                 min_size=sum(span), max_size=sum(span)))  # fmt: skip
    ws = data.draw(st.lists(st.integers(0, 10**6), min_size=len(span), max_size=len(span)))
    stops = np.cumsum(lengths, dtype=np.int64) + data.draw(st.integers(0, 100))
    starts = stops - np.array(lengths, dtype=np.int64)
    docs = np.array(data.draw(st.permutations(range(sum(span)))), dtype=np.int64) * 3 + 1
    perm = np.arange(len(docs))  # documents in any order of the corpus
    order = np.array(data.draw(st.permutations(perm.tolist())), dtype=np.int64)
    columns = (docs, starts[order], stops[order])
    args = (np.array(span, dtype=np.int64), ws, capacity, split, key)
    got_counts, got = pack_compiled(kernel, columns, *args)
    want_counts, want = pack_numpy(columns, *args)
    assert got_counts.tolist() == want_counts.tolist()
    assert len(got) == len(want) == len(span)
    for mine, theirs in zip(got, want, strict=True):
        assert [c.dtype for c in mine] == [c.dtype for c in theirs]
        assert [c.tolist() for c in mine] == [c.tolist() for c in theirs]


@needs_kernel
def test_the_kernel_refuses_spans_that_miss_the_documents_and_a_stop_before_its_start() -> None:
    def call(span: list[int], stops: list[int], pieces: int = 2) -> object:
        empty = [np.empty(pieces, dtype=np.int64) for _ in range(3)]
        return kernel.pack_windows(np.arange(2), np.array([0, 3]), np.array(stops),
                                   np.array(span), 4, True, _round_seeds(0),
                                   np.zeros(len(span), dtype=np.int64),
                                   np.empty(len(span), dtype=np.int64), *empty,
                                   np.empty(pieces, dtype=np.bool_),
                                   np.empty(pieces + len(span), dtype=np.int64))  # fmt: skip

    assert call([1, 1], [3, 5]) == 2
    with pytest.raises(ValueError, match=r"spans should sum to 2 documents, not 1"):
        call([1], [3, 5])
    with pytest.raises(
        ValueError, match=r"spans should be at least 1 and sum to 2 documents, but span 1 is 2"
    ):
        call([1, 2], [3, 5])
    with pytest.raises(
        ValueError, match=r"stops should not be before starts, but document 1 is \[3, 2\)"
    ):
        call([2], [3, 2])
    with pytest.raises(ValueError, match=r"docs_out should hold 3 items of 8 bytes, not 16 bytes"):
        call([1, 1], [3, 8])  # 3 and 5 tokens: three pieces of at most 4
    with pytest.raises(ValueError, match=r"counts should be in \[1, 2\*\*62\], but count 1 is 0"):
        kernel.feistel_orders(np.array([2, 0]), np.zeros(2, dtype=np.int64), _round_seeds(0),
                              np.empty(2, dtype=np.int64))  # fmt: skip
