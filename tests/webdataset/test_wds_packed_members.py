"""A shard's packed members (detsamplers/loader/_wds/shard/_packed_members.py).

Law: ``PackedMembers(suffixes, offsets, sizes, starts)`` is, as a sequence, exactly the list
of each sample's ``[suffix, offset, size]`` lists that the flat lists describe (negative
indexes, slices, equality, pickling included); ``ordered`` holds exactly when the members
lie in the file in order without overlapping.
"""

from __future__ import annotations

import itertools
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from detsamplers.loader._wds.shard._packed_members import PackedMembers

Member = tuple[str, int, int]

samples_st = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from(["cls", "jpg", "png", "txt", "json"]),
            st.integers(-4, 10_000),
            st.integers(-2, 5_000),
        ),
        max_size=4,
    ),
    max_size=12,
)


def packed(samples: list[list[Member]]) -> PackedMembers:
    """The packed form of ``samples``, built the way a scan or an index file builds it."""
    suffixes, offsets, sizes, starts = [], [], [], [0]
    for members in samples:
        for suffix, offset, size in members:
            suffixes.append(suffix)
            offsets.append(offset)
            sizes.append(size)
        starts.append(len(suffixes))
    return PackedMembers(suffixes, offsets, sizes, starts)


def nested(samples: list[list[Member]]) -> list[list[list[Any]]]:
    return [[list(member) for member in members] for members in samples]


@given(samples=samples_st, data=st.data())
def test_packed_members_read_as_the_nested_lists_they_pack_at_every_index_and_slice(
    samples: list[list[Member]], data: st.DataObject
) -> None:
    members, expected = packed(samples), nested(samples)
    assert len(members) == len(expected)
    assert list(members) == expected
    for index in range(-len(expected), len(expected)):
        assert members[index] == expected[index]
    start, stop = data.draw(st.integers(-15, 15)), data.draw(st.integers(-15, 15))
    step = data.draw(st.sampled_from([1, 2, 3, -1, -2]))
    assert members[start:stop:step] == expected[start:stop:step]


@given(samples=samples_st, beyond=st.integers(0, 5))
def test_an_index_past_either_end_raises_index_error_naming_it_and_the_count(
    samples: list[list[Member]], beyond: int
) -> None:
    members = packed(samples)
    count = len(samples)
    for index in (count + beyond, -count - 1 - beyond):
        with pytest.raises(IndexError, match=rf"^sample {index} of {count}$"):
            members[index]


@given(samples=samples_st)
def test_packed_members_equal_their_nested_lists_and_any_equal_sequence_but_are_unhashable(
    samples: list[list[Member]],
) -> None:
    members = packed(samples)
    assert members == nested(samples)
    assert members == packed(samples)
    assert members != [*nested(samples), [["cls", 0, 1]]]
    assert members != "not a sequence of samples"
    assert members != 3
    with pytest.raises(TypeError):
        hash(members)
    assert repr(members) == repr(nested(samples))


@given(samples=samples_st)
def test_a_pickled_copy_packs_the_same_lists_and_recomputes_what_it_caches(
    samples: list[list[Member]],
) -> None:
    members = packed(samples)
    members.arrays = {"offsets": None}  # type: ignore[dict-item]
    members.table = object()
    was_ordered = members.ordered
    copy = pickle.loads(pickle.dumps(members))
    assert copy == members
    assert (copy.suffixes, copy.offsets, copy.sizes, copy.starts) == (
        members.suffixes,
        members.offsets,
        members.sizes,
        members.starts,
    )
    assert copy.arrays is None and copy.table is None
    assert copy.ordered == was_ordered


@given(samples=samples_st)
def test_ordered_holds_exactly_when_members_follow_each_other_in_the_file_without_overlap(
    samples: list[list[Member]],
) -> None:
    flat = [member for members in samples for member in members]
    expected = all(size >= 0 for _, _, size in flat) and (not flat or flat[0][1] >= 0)
    expected = expected and all(
        later[1] >= earlier[1] + earlier[2] for earlier, later in itertools.pairwise(flat)
    )
    assert packed(samples).ordered is expected


def test_a_tar_laid_out_shard_is_ordered_and_one_overlap_or_step_back_is_not() -> None:
    tar = [[("cls", 512, 1), ("jpg", 1536, 900)], [("cls", 3072, 1)]]
    assert packed(tar).ordered
    overlapping = [[("cls", 512, 1), ("jpg", 1536, 900)], [("cls", 2000, 1)]]
    assert not packed(overlapping).ordered
    backwards = [[("cls", 3072, 1)], [("cls", 512, 1)]]
    assert not packed(backwards).ordered
    touching = [[("cls", 0, 512)], [("cls", 512, 0)], [("txt", 512, 3)]]
    assert packed(touching).ordered


@given(samples=samples_st)
def test_ordered_read_from_the_index_files_arrays_is_the_lists_answer(
    samples: list[list[Member]],
) -> None:
    """A decoded index keeps its file's arrays; ``ordered`` reads them instead of the lists."""
    lists = packed(samples)
    arrays = {
        name: np.asarray(getattr(lists, name), dtype=np.int64)
        for name in ("offsets", "sizes", "starts")
    }
    with_arrays = PackedMembers(lists.suffixes, lists.offsets, lists.sizes, lists.starts, arrays)
    assert with_arrays.ordered is lists.ordered
    # The arrays are what is read: arrays that say otherwise give their own answer.
    if lists.offsets:
        arrays["sizes"] = np.full(len(lists.sizes), -1, dtype=np.int64)
        lying = PackedMembers(lists.suffixes, lists.offsets, lists.sizes, lists.starts, arrays)
        assert lying.ordered is False
