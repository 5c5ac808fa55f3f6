"""A mixture's saved state on its own (loader/_wds/mix/_mixture_state.py), without shards.

NOTE [ mixture state ]. test_wds_mix.py loads states into real mixtures (a changed weight,
seed or shard set, a rewritten shard, an unknown key); these build states by hand to
check the module's own rules: the shape a state must have whatever it holds (what
``inspect`` checks alone), the old versions' per-shard counts, what counts as a
difference at a resume position, and the fingerprint that leaves the curriculum out.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from detsamplers import ReproducibilityError
from detsamplers.loader._wds.mix._mixture_state import (
    MIX_STATE_VERSION,
    check_mix_shape,
    check_mix_state,
    differences,
    stable,
    summarize_sets,
)

COUNTS = [[3, 4], [5, 5, 2]]


def config(**changes: Any) -> dict[str, Any]:
    base = {"seed": 0, "weights": [0.5, 0.5], "window": 64, "shuffle_shards": True,
            "shuffle_window": 3, "shards": ["set-a", "set-b"], "curriculum": None}  # fmt: skip
    return {**base, **changes}


def state(position: int = 8, **changes: Any) -> dict[str, Any]:
    here = config()
    saved = {"version": MIX_STATE_VERSION, "position": position, "fingerprint": stable(here),
             "config": here, "counts": summarize_sets(COUNTS)}  # fmt: skip
    return {**saved, **changes}


def load(saved: dict[str, Any], here: dict[str, Any] | None = None) -> int:
    here = config() if here is None else here
    return check_mix_state(saved, config=here, fingerprint_here=stable(here),
                           paths=[["a0.tar", "a1.tar"], ["b0.tar", "b1.tar", "b2.tar"]],
                           counts=COUNTS, summaries=summarize_sets(COUNTS))  # fmt: skip


def test_a_state_gives_its_position_and_each_sets_shard_count_old_versions_too() -> None:
    assert check_mix_shape(state()) == (8, [2, 3])
    for version in (1, 2):
        assert check_mix_shape(state(version=version, counts=COUNTS)) == (8, [2, 3])
    assert load(state()) == 8
    assert load(state(version=1, counts=COUNTS)) == 8


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        ([1, 2], TypeError, r"state should be a dict from .* of type list"),
        ({"position": 1}, ValueError, r"lacks version, fingerprint, config, counts"),
        (state(version=9), ValueError, r"state\['version'\] should be 3, but got 9"),
        (state(config=[1]), TypeError, r"state\['config'\] should be the dict of settings"),
        (state(counts={"shards": 2}), TypeError, r"state\['counts'\] should be a list"),
        (state(version=2, counts=summarize_sets(COUNTS)), TypeError, r"got version 2 with"),
        (state(counts=[{"shards": True}]), TypeError, r"a counts summary per shard set"),
        (state(counts=[{"shards": "2"}]), TypeError, r"a counts summary per shard set"),
        (state(mixture={}, extra=1), ValueError, r"state has keys extra that WebDatasetMix"),
    ],
)
def test_a_state_of_the_wrong_shape_is_refused_naming_what_is_wrong(
    bad: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        check_mix_shape(bad)


def test_an_old_states_changed_shard_count_and_an_edited_fingerprint_are_named() -> None:
    with pytest.raises(ReproducibilityError, match=r"shard 'b1.tar' had 4 samples .* 5 now"):
        load(state(version=1, counts=[[3, 4], [5, 4, 2]]))
    with pytest.raises(ReproducibilityError, match=r"fingerprint does not match"):
        load(state(fingerprint="0" * 16))


def test_the_curriculum_may_change_from_the_saved_position_on_but_not_before() -> None:
    sizes, here = [2, 3], [[3, 4], [5, 5, 2]]
    before = config(curriculum=[[0, [0.5, 0.5]], [4, [0.9, 0.1]]])
    later = config(curriculum=[[0, [0.5, 0.5]], [4, [0.9, 0.1]], [20, [0.1, 0.9]]])
    assert differences(before, sizes, later, here, position=8) == []
    changed = config(curriculum=[[0, [0.5, 0.5]], [6, [0.9, 0.1]]])
    found = differences(before, sizes, changed, here, position=8)
    assert len(found) == 1 and "curriculum changed before position 8" in found[0]


def test_a_set_appended_must_enter_at_or_after_the_saved_position() -> None:
    sizes, here = [2, 3], [[3, 4], [5, 5, 2], [1]]
    plan = [[0, [0.5, 0.5]], [10, [0.4, 0.4, 0.2]]]
    added = config(shards=["set-a", "set-b", "set-c"], curriculum=plan)
    saved = config(curriculum=[[0, [0.5, 0.5]]])
    assert differences(saved, sizes, added, here, position=10) == []
    with pytest.raises(ReproducibilityError, match=r"urls\[2:\] enter the mixture at position 10"):
        differences(saved, sizes, added, here, position=11)
    inserted = config(shards=["set-c", "set-a", "set-b"], curriculum=plan)
    with pytest.raises(ReproducibilityError, match=r"urls\[0\] is not the saved run's urls\[0\]"):
        differences(saved, sizes, inserted, here, position=10)


def test_reordered_sets_are_named_as_reordered_not_as_other_files() -> None:
    swapped = config(shards=["set-b", "set-a"])
    found = differences(config(), [2, 3], swapped, [[5, 5, 2], [3, 4]], position=0)
    assert found == [
        "the shard sets are in another order than in the state; keep the saved order "
        "(a shard set added at a resume goes last)"
    ]


def test_a_key_an_older_state_lacks_counts_as_off() -> None:
    old = {k: v for k, v in config().items() if k != "shuffle_window"}
    assert differences(old, [2, 3], config(shuffle_block_shards=0), COUNTS, 0) == [
        "shuffle_window is None in the state but 3 here"
    ]
    assert differences(old | {"shuffle_window": 3}, [2, 3], config(parts=0), COUNTS, 0) == []


@given(
    plans=st.lists(
        st.none() | st.lists(st.tuples(st.integers(0, 99), st.just([0.5, 0.5])).map(list)),
        min_size=2,
        max_size=2,
    ),
    seed=st.integers(0, 9),
)
def test_the_fingerprint_leaves_the_curriculum_out_and_keeps_every_other_setting(
    plans: list[Any], seed: int
) -> None:
    assert stable(config(curriculum=plans[0])) == stable(config(curriculum=plans[1]))
    assert stable(config(seed=seed)) != stable(config(seed=seed + 1))
