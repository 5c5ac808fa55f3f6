"""MixSampler pickles without its arrangement tables and rebuilds them identically."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import detsamplers as ds
from detsamplers import MixSampler


def mixture() -> MixSampler:
    """A mixture with a window of 1024 and a curriculum: tables of about 3 MB per segment."""
    samplers = [ds.ReproducibleShuffleSampler(range(n), i) for i, n in enumerate([50, 7, 300])]
    return MixSampler(
        samplers, [0.3721, 0.2, 0.4279], seed=11, curriculum=[(5000, [0.1, 0.5, 0.4])]
    )


USED = mixture()
USED.locate(np.arange(0, 20_000, 3, dtype=np.int64))  # builds arrangements of both segments


@settings(max_examples=25, deadline=None)
@given(
    positions=st.lists(st.integers(0, 10**12), min_size=1, max_size=40),
    first=st.integers(0, 10**9),
    stride=st.integers(1, 64),
)
def test_an_unpickled_mixture_gives_the_same_records_at_any_position(
    positions: list[int], first: int, stride: int
) -> None:
    copy = pickle.loads(pickle.dumps(USED))
    fresh = mixture()
    at = np.asarray(positions, dtype=np.int64)
    block = first + stride * np.arange(100, dtype=np.int64)  # a rank's block
    run = first + np.arange(100, dtype=np.int64)  # consecutive positions
    for wanted in (at, block, run):
        expected = USED.locate(wanted)
        for other in (copy, fresh):
            got = other.locate(wanted)
            assert got[0].tolist() == expected[0].tolist()
            assert got[1].tolist() == expected[1].tolist()
        assert copy.records(wanted).tolist() == USED.records(wanted).tolist()
    assert copy.progress(first) == USED.progress(first)


def test_the_pickle_leaves_the_arrangement_tables_behind() -> None:
    used = mixture()
    used.locate(np.arange(0, 20_000, 3, dtype=np.int64))
    built = [int(s._built.sum()) for s in used._segments]
    assert all(b > 0 for b in built)
    data = pickle.dumps(used)
    tables = sum(s._codes.nbytes + s._before.nbytes for s in used._segments)
    assert tables > 1_000_000
    assert len(data) < 100_000
    copy = pickle.loads(data)
    assert [int(s._built.sum()) for s in copy._segments] == [0, 0]  # rebuilt when used
    assert [s._codes.shape for s in copy._segments] == [s._codes.shape for s in used._segments]
    assert [int(s._built.sum()) for s in used._segments] == built  # the original is intact
