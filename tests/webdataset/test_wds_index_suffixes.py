"""An index file's member suffixes, decoded (detsamplers/loader/_wds/index/_shard_index_file.py).

Law: ``_split_suffixes(suffixes, starts)`` is ``_split(suffixes)`` for every byte string and
every ``starts`` array, a hostile one included; when every sample repeats the first
sample's suffixes it is built by repeating them, and a ``starts`` that lies about the
number of samples allocates nothing beyond the bytes given.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from detsamplers.loader._wds.index._shard_index_file import (
    _joined,
    _split,
    _split_suffixes,
    decode_index,
    encode_index,
)

suffix_st = st.sampled_from(["cls", "png", "jpg", "json", "txt", "é.npy"])


@given(
    first=st.lists(suffix_st, min_size=1, max_size=4),
    samples=st.integers(1, 20),
    change=st.none() | st.tuples(st.integers(0, 200), suffix_st),
)
def test_repeated_suffixes_split_as_the_whole_string_and_share_the_first_samples_strings(
    first: list[str], samples: int, change: tuple[int, str] | None
) -> None:
    flat = first * samples
    if change is not None:  # one member's suffix changed: no longer a repetition
        flat[change[0] % len(flat)] = change[1]
    starts = np.arange(0, len(flat) + 1, len(first), dtype=np.int64)
    got = _split_suffixes(_joined(flat), starts)
    assert got == _split(_joined(flat)) == flat
    if flat == first * samples and samples > 1:
        assert got[len(first)] is got[0]  # the first sample's strings, repeated


@given(
    suffixes=st.lists(suffix_st, max_size=12),
    starts=st.lists(st.integers(-(2**62), 2**62), max_size=12),
)
def test_any_starts_array_splits_as_the_whole_string(
    suffixes: list[str], starts: list[int]
) -> None:
    data = _joined(suffixes)
    assert _split_suffixes(data, np.asarray(starts, dtype=np.int64)) == _split(data)


def test_starts_claiming_a_million_samples_of_a_short_string_allocate_nothing_more() -> None:
    data = _joined(["cls", "png"] * 4)
    starts = np.arange(0, 2_000_002, 2, dtype=np.int64)  # a million samples of 2 members
    tracemalloc.start()
    try:
        got = _split_suffixes(data, starts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == ["cls", "png"] * 4
    assert peak < 64 << 10  # the repeated bytes would be 8 MB


def test_an_index_file_of_repeated_suffixes_decodes_to_each_members_suffix() -> None:
    keys = [f"k{i}" for i in range(5)]
    members = [[["cls", 1024 + 2048 * i, 1], ["png", 2048 + 2048 * i, 70]] for i in range(5)]
    _, decoded, _, _ = decode_index(encode_index(keys, members, 2048 * 6, None), "a.tar")
    assert decoded.suffixes == ["cls", "png"] * 5
    assert [list(m) for m in decoded] == members
