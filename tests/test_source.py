"""The chain's sources (detsamplers/_source.py): how any sampler becomes the bottom link.

Law (NOTE [ position algebra ]): an addressable source's position ``p`` is ``values[p % n]``,
for every pass; a source that cannot be addressed is iterated, pass after pass, as it is.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch.utils.data as tud
from hypothesis import given
from hypothesis import strategies as st

from detsamplers._batch import BatchSource
from detsamplers._source import ForeignSource, IndexSource, as_node
from tests.helpers import ForeignSampler

values_st = st.one_of(
    st.builds(range, st.integers(-50, 50), st.integers(-50, 50), st.sampled_from([1, 2, 3, -1])),
    st.lists(st.integers(0, 2**40), min_size=1, max_size=30),
)


@given(values=values_st, positions=st.lists(st.integers(0, 10**6), max_size=40))
def test_an_addressable_source_at_position_p_is_the_value_at_p_mod_n(
    values: range | list[int], positions: list[int]
) -> None:
    node = as_node(values)
    assert isinstance(node, IndexSource) and node.indexable
    if len(values) == 0:  # an empty range: no records at any position
        assert node.pass_length == 0
        assert node.records(np.asarray(positions, dtype=np.int64)).tolist() == []
        return
    assert node.pass_length == len(values)
    got = node.records(np.asarray(positions, dtype=np.int64)).tolist()
    assert got == [values[p % len(values)] for p in positions]
    assert list(node.fallback_pass(3)) == list(values)  # every pass, iterated, is the values


def test_each_thing_a_stage_is_given_becomes_the_source_that_can_read_it() -> None:
    assert as_node(tud.SequentialSampler(range(5))).config() == {
        "source": "SequentialSampler",
        "length": 5,
    }
    assert as_node(range(4)).config() == {"source": "range", "length": 4}
    assert isinstance(as_node(tud.BatchSampler(range(4), 2, False)), BatchSource)
    assert isinstance(as_node(np.array([3, 1], dtype=np.uint8)), IndexSource)
    for unaddressable in ([0.5, 1.5], np.zeros((2, 2), dtype=np.int64), [], ForeignSampler([2])):
        assert isinstance(as_node(unaddressable), ForeignSource), unaddressable
    stage = as_node(range(3))
    assert as_node(stage) is stage


@given(st.lists(st.integers(0, 100), min_size=1, max_size=20), st.integers(0, 19))
def test_the_fingerprint_of_an_index_array_changes_with_any_value_and_only_then(
    values: list[int], where: int
) -> None:
    base = as_node(values).config()
    assert as_node(list(values)).config() == base
    changed = list(values)
    changed[where % len(values)] += 1
    assert as_node(changed).config() != base
    assert base["length"] == len(values)


def test_a_range_other_than_0_to_n_is_fingerprinted_by_its_values() -> None:
    assert "values" not in as_node(range(6)).config()
    assert as_node(range(1, 7)).config()["values"] != as_node(range(0, 12, 2)).config()["values"]


def test_a_foreign_sampler_is_iterated_and_reports_its_length_or_none() -> None:
    class Unsized(tud.Sampler[int]):
        def __iter__(self) -> Iterator[int]:
            return iter([4, 2])

    sized = as_node(ForeignSampler([7, 5, 6]))
    assert not sized.indexable
    assert (sized.pass_length, list(sized.fallback_pass(0))) == (3, [7, 5, 6])
    assert sized.config() == {"source": "tests.helpers.ForeignSampler", "length": 3}
    unsized = as_node(Unsized())
    assert (unsized.pass_length, unsized.config()["length"]) == (0, None)
    assert list(unsized.fallback_pass(5)) == [4, 2]
