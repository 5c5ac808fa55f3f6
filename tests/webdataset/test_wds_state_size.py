"""A source's state stays small at any shard count, names a changed shard, and loads old states."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wds_helpers import make

from detsamplers import ReproducibilityError
from detsamplers.loader import WebDatasetSource
from detsamplers.loader._wds._source_state import check_state, summarize_counts

FIXTURE = Path(__file__).parent / "fixtures" / "source_state_v1.json"


def synthetic_source(counts: list[int]) -> WebDatasetSource:
    """A source over ``len(counts)`` shards that exist only as an index (nothing is read)."""
    source = WebDatasetSource.__new__(WebDatasetSource)
    source.shards = []  # state_dict() reads only the counts
    source._counts = counts
    source._fingerprint = "0" * 16
    source._config = {"seed": 0, "shuffle_shards": True, "shuffle_window": 0, "repeat": True}
    source.position = 123_456_789_012
    return source


def test_the_state_of_a_million_shards_is_at_most_one_kilobyte_of_json() -> None:
    counts = [10_000 + (i * 7919) % 5_000 for i in range(1_000_000)]
    state = synthetic_source(counts).state_dict()
    size = len(json.dumps(state))
    assert size <= 1024, size
    assert state["counts"]["shards"] == 1_000_000
    assert state["counts"]["samples"] == sum(counts)


def test_a_count_changed_in_one_of_a_million_shards_is_named_on_load() -> None:
    counts = [10_000 + (i * 7919) % 5_000 for i in range(1_000_000)]
    state = json.loads(json.dumps(synthetic_source(counts).state_dict()))
    paths = [f"s3://b/d-{i:07d}.tar" for i in range(len(counts))]
    counts[765_432] -= 3
    with pytest.raises(
        ReproducibilityError,
        match=r"shard 's3://b/d-0765432\.tar' had \d+ samples when the state was saved but has",
    ):
        check_state(
            state,
            config=state["config"],
            fingerprint=state["fingerprint"],
            paths=paths,
            counts=counts,
            global_batch=None,
            end=None,
        )


def _check(saved: dict[str, Any], counts: list[int]) -> None:
    check_state(
        {"version": 2, "position": 0, "fingerprint": "f", "config": {}, "counts": saved},
        config={},
        fingerprint="f",
        paths=[f"d-{i}.tar" for i in range(len(counts))],
        counts=counts,
        global_batch=None,
        end=None,
    )


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(0, 10**9), min_size=1, max_size=200),
    data=st.data(),
)
def test_any_one_changed_count_is_named_with_its_old_and_new_value(
    counts: list[int], data: st.DataObject
) -> None:
    saved = summarize_counts(counts)
    _check(saved, counts)  # unchanged: loads
    shard = data.draw(st.integers(0, len(counts) - 1))
    new = data.draw(st.integers(0, 10**9).filter(lambda c: c != counts[shard]))
    changed = [*counts[:shard], new, *counts[shard + 1 :]]
    message = (
        rf"shard 'd-{shard}\.tar' had {counts[shard]} samples when the state was saved "
        rf"but has {new} now"
    )
    with pytest.raises(ReproducibilityError, match=message):
        _check(saved, changed)


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(0, 10**9), min_size=2, max_size=200),
    data=st.data(),
)
def test_any_two_changed_counts_a_swap_included_are_named_with_their_values(
    counts: list[int], data: st.DataObject
) -> None:
    first, second = sorted(
        data.draw(st.lists(st.integers(0, len(counts) - 1), min_size=2, max_size=2, unique=True))
    )
    changed = list(counts)
    if data.draw(st.booleans()):  # the two shards' contents swapped: the total is kept
        changed[first], changed[second] = counts[second], counts[first]
    else:
        changed[first] = data.draw(st.integers(0, 10**9))
        changed[second] = data.draw(st.integers(0, 10**9))
    if changed == counts:
        return
    named = [
        rf"shard 'd-{i}\.tar' had {counts[i]} samples when the state was saved but has "
        rf"{changed[i]} now"
        for i in (first, second)
        if changed[i] != counts[i]
    ]
    with pytest.raises(ReproducibilityError, match="; ".join(named)):
        _check(summarize_counts(counts), changed)


@settings(max_examples=100, deadline=None)
@given(counts=st.lists(st.integers(0, 1000), min_size=2, max_size=50), data=st.data())
def test_any_other_change_of_the_counts_is_refused(counts: list[int], data: st.DataObject) -> None:
    changed = data.draw(
        st.permutations(counts).map(list).filter(lambda c: c != counts)
        | st.lists(st.integers(0, 1000), min_size=len(counts), max_size=len(counts)).filter(
            lambda c: c != counts
        )
    )
    with pytest.raises(ReproducibilityError, match="cannot resume WebDatasetSource"):
        _check(summarize_counts(counts), changed)


@pytest.mark.parametrize("name", ["plain", "block", "window"])
def test_a_state_saved_with_a_count_per_shard_still_loads_and_resumes_the_same(
    shards: str, name: str
) -> None:
    saved = json.loads(FIXTURE.read_text())["states"][name]
    assert saved["state"]["version"] == 1 and isinstance(saved["state"]["counts"], list)
    resumed = make(shards, **{**saved["arguments"], "skip": 0})
    resumed.load_state_dict(saved["state"])
    straight = make(shards, **saved["arguments"])
    assert resumed.state_dict() == straight.state_dict()
    first, second = next(iter(resumed)), next(iter(straight))
    assert [int(x) for x in first] == [int(x) for x in second]


def test_an_old_state_whose_shard_count_changed_is_still_named(shards: str) -> None:
    saved = json.loads(FIXTURE.read_text())["states"]["plain"]["state"]
    saved["counts"][3] += 1
    with pytest.raises(
        ReproducibilityError,
        match=r"shard '.*data-000003\.tar' had 12 samples when the state was saved but has 11",
    ):
        make(shards, seed=7, batch_size=3).load_state_dict(saved)


def test_a_malformed_counts_summary_is_refused_naming_the_key(shards: str) -> None:
    source = make(shards)
    state = source.state_dict()
    with pytest.raises(TypeError, match=r"state\['counts'\] should be the list .* or its summary"):
        source.load_state_dict({**state, "counts": {**state["counts"], "moments": [1]}})
