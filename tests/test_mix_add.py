"""MixSampler: a component added at a resume, and a curriculum changed with a growth."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

import detsamplers as ds
from detsamplers import GrowingShuffleSampler, MixSampler
from detsamplers.loader import DataLoader, check_reproducible
from tests.helpers import take

LENGTHS = [10, 5, 3]
WEIGHTS = [0.6, 0.25, 0.15]
ADDED = 7  # the length of the dataset added at the resume
NEW_WEIGHTS = [0.3, 0.2, 0.1, 0.4]


def chain(world: int, rank: int, size: int, skip: int = 0, **kwargs: Any) -> Any:
    """The K-mixture's training chain, or with ``added=`` the (K+1)-mixture's."""
    start = kwargs.pop("added", None)
    datasets: list[Any] = [range(n) for n in LENGTHS]
    if start is not None:
        datasets.append(range(ADDED))
        kwargs["curriculum"] = [(start, kwargs.pop("weights", NEW_WEIGHTS))]
    return ds.make_mixed_batch_sampler(datasets, WEIGHTS, 3, world, rank, size, skip, **kwargs)


def global_batches(batches: list[list[list[int]]]) -> list[list[int]]:
    """Global batch t of each rank's batches t, as a sorted list (order within differs)."""
    return [sorted(i for rank in batches for i in rank[t]) for t in range(len(batches[0]))]


# -- the law ------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**40),
    start=st.integers(1, 120),
    new=st.lists(st.integers(0, 5), min_size=4, max_size=4).filter(lambda w: sum(w) > 0),
)
def test_the_past_is_the_old_mixture_and_the_added_component_starts_at_its_position_0(
    seed: int, start: int, new: list[int]
) -> None:
    samplers = [ds.ReproducibleShuffleSampler(range(n), seed + i) for i, n in enumerate(LENGTHS)]
    old = MixSampler(samplers, WEIGHTS, seed)
    added = ds.ReproducibleShuffleSampler(range(ADDED), seed + 3)
    mix = MixSampler([*samplers, added], WEIGHTS, seed, curriculum=[(start, new)])
    positions = np.arange(start + 200, dtype=np.int64)
    assert np.array_equal(mix.records(positions[:start]), old.records(positions[:start]))
    component, position = mix.locate(positions)
    assert not bool((component[:start] == 3).any())
    assert [c for c in range(4) if new[c] > 0] == sorted(set(component[start:].tolist()))
    before = old.progress(start)["consumed"]
    assert mix.progress(start)["consumed"] == [*before, 0]
    for c in range(4):  # each component goes on in order, none loses or repeats a position
        assert position[component == c].tolist() == list(range(int((component == c).sum())))
    # Every pass of every component holds each of its records exactly once.
    records = mix.records(positions)
    offsets = np.concatenate([[0], np.cumsum([*LENGTHS, ADDED])])
    for c, n in enumerate([*LENGTHS, ADDED]):
        mine = (records[component == c] - offsets[c]).tolist()
        for p in range(len(mine) // n):
            assert sorted(mine[p * n : (p + 1) * n]) == list(range(n))


def test_a_zero_weight_column_would_change_the_past_so_earlier_segments_keep_theirs() -> None:
    # The number of arrangements depends on the columns: 16 for 2 components of a window of
    # 4096, 8 for 3. Giving the new component weight 0 from position 0 changes the law.
    samplers, plan = [range(3000), range(1000)], [(20_000, [1, 1, 1])]
    old = MixSampler(samplers, [3, 1], 0, window=4096)
    zero = MixSampler([*samplers, range(5)], [3, 1, 0], 0, window=4096)
    added = MixSampler([*samplers, range(5)], [3, 1], 0, window=4096, curriculum=plan)
    positions = np.arange(20_000, dtype=np.int64)
    assert not np.array_equal(old.records(positions), zero.records(positions))
    assert np.array_equal(old.records(positions), added.records(positions))


def test_the_state_records_the_added_component_and_a_later_resume_rebuilds_it() -> None:
    saved = chain(1, 0, 4, 5).state_dict()
    assert saved["mixture"] == {"position": 20, "consumed": [12, 5, 3], "epochs": [1, 1, 1]}
    resumed = chain(1, 0, 4, added=20)
    resumed.load_state_dict(saved)
    assert take(resumed, 4) == take(chain(1, 0, 4, 5, added=20), 4)
    later = resumed.state_dict()
    assert later["position"] == 9
    assert later["chain"][0]["lengths"] == [*LENGTHS, ADDED]
    assert later["chain"][0]["curriculum"] == [[20, NEW_WEIGHTS, 10]]
    assert later["mixture"]["consumed"][3] == 6  # its own positions 0..5 so far
    again = chain(1, 0, 4, added=20)
    again.load_state_dict(json.loads(json.dumps(later)))
    assert take(again, 3) == take(chain(1, 0, 4, 9, added=20), 3)


@settings(max_examples=6, deadline=None)
@given(world=st.integers(1, 3), size=st.integers(1, 3), data=st.data())
def test_resuming_from_every_position_with_a_component_added_is_the_straight_run(
    world: int, size: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    horizon = 16
    saving = chain(world, rank, size)
    iterator = iter(saving)
    for consumed in range(horizon):
        state = json.loads(json.dumps(saving.state_dict()))
        reached = state["samples"]
        assert reached == consumed * world * size
        resumed = chain(world, rank, size, added=max(reached, 1))
        resumed.load_state_dict(state)
        straight = chain(world, rank, size, consumed, added=max(reached, 1))
        assert take(resumed, 3) == take(straight, 3)
        next(iterator)


@settings(max_examples=10, deadline=None)
@given(
    saved_world=st.sampled_from([1, 2, 3, 6]),
    world=st.sampled_from([1, 2, 3, 6]),
    trained=st.integers(0, 12),
)
def test_a_component_added_at_an_elastic_resume_gives_the_straight_global_batches(
    saved_world: int, world: int, trained: int
) -> None:
    state = chain(saved_world, 0, 6 // saved_world, trained).state_dict()
    reached = state["samples"]
    assert reached == trained * 6
    ranks = []
    for rank in range(world):
        resumed = chain(world, rank, 6 // world, added=max(reached, 1))
        resumed.load_state_dict(state)
        ranks.append(take(resumed, 4))
    straight = [take(chain(1, 0, 6, trained, added=max(reached, 1)), 4)]
    assert global_batches(ranks) == global_batches(straight)


# -- what is refused ----------------------------------------------------------------------


def test_construction_names_the_segment_whose_weights_do_not_fit() -> None:
    samplers = [range(n) for n in [*LENGTHS, ADDED]]
    with pytest.raises(ValueError, match=r"weights should have one weight per sampler \(4\), "):
        MixSampler(samplers, WEIGHTS, 0)
    with pytest.raises(ValueError, match=r"samplers\[3:\] would never be mixed in.*curriculum="):
        MixSampler(samplers, WEIGHTS, 0, curriculum=[(5, WEIGHTS)])
    with pytest.raises(
        ValueError,
        match=r"curriculum\[1\] weights should have one weight per sampler \(4\), but got 3.*"
        r"names 4, and a component cannot leave a mixture: give it weight 0",
    ):
        MixSampler(samplers, WEIGHTS, 0, curriculum=[(5, NEW_WEIGHTS), (9, WEIGHTS)])
    with pytest.raises(ValueError, match=r"curriculum\[0\] weights\[3\] is positive"):
        MixSampler([*samplers[:3], range(0)], WEIGHTS, 0, curriculum=[(5, NEW_WEIGHTS)])
    with pytest.raises(ValueError, match=r"but got 0: weights=\[\]; it names the samplers mixed"):
        MixSampler(samplers, [], 0, curriculum=[(5, NEW_WEIGHTS)])
    two_steps = MixSampler(samplers, WEIGHTS[:2], 0, curriculum=[(5, WEIGHTS), (9, NEW_WEIGHTS)])
    assert two_steps.progress(9)["consumed"][3] == 0
    assert two_steps.progress(5)["consumed"][2:] == [0, 0]


def test_a_component_entering_before_the_reached_position_is_refused() -> None:
    state = chain(2, 0, 2, 5).state_dict()  # 20 positions reached
    with pytest.raises(
        ds.ReproducibilityError,
        match=r"samplers\[3:\] enter the mixture at position 19 .* start that segment at "
        r"position 20 or later",
    ):
        chain(2, 0, 2, added=19).load_state_dict(state)
    datasets = [range(n) for n in [*LENGTHS, ADDED]]
    from_zero = ds.make_mixed_batch_sampler(datasets, NEW_WEIGHTS, 3, 2, 0, 2)
    with pytest.raises(
        ds.ReproducibilityError,
        match=r"samplers\[3:\] enter this mixture at position 0 .* keep the saved weights and "
        r"add them with a curriculum segment of 4 weights from position 20 on",
    ):
        from_zero.load_state_dict(state)


def mixture_chain(samplers: list[Any], weights: list[float], **kwargs: Any) -> Any:
    mix = MixSampler(samplers, weights, 0, **kwargs)
    return ds.SkipBatchSampler(tud.BatchSampler(ds.DistributedSampler(mix, 1, 0), 4, False), 0)


@pytest.mark.parametrize(
    ("order", "weights", "message"),
    [
        ([0, 3, 1, 2], [1, 1, 1, 1], r"samplers\[1\] is not the saved run's .*goes last"),
        ([0, 2], [1, 1], r"mixed 3 samplers but this mixture has 2.*cannot be removed"),
        ([1, 0, 2], [1, 1, 1], "samplers are in another order than the saved run's"),
    ],
)
def test_inserting_removing_or_reordering_components_is_refused_naming_the_fix(
    order: list[int], weights: list[float], message: str
) -> None:
    samplers = [ds.ReproducibleShuffleSampler(range(n), i) for i, n in enumerate([*LENGTHS, 7])]
    saving = mixture_chain(samplers[:3], WEIGHTS)
    take(saving, 5)
    state = saving.state_dict()
    plan = {"curriculum": [(20, weights)]} if len(order) > 3 else {}
    first = weights[:3] if len(order) > 3 else weights
    changed = mixture_chain([samplers[i] for i in order], first, **plan)
    with pytest.raises(ds.ReproducibilityError, match=message):
        changed.load_state_dict(state)


# -- through the loader ---------------------------------------------------------------------


def datasets(added: bool) -> list[tud.Dataset[Any]]:
    out: list[tud.Dataset[Any]] = [
        tud.TensorDataset(torch.arange(100 * k, 100 * k + n)) for k, n in enumerate(LENGTHS)
    ]
    return [*out, tud.TensorDataset(torch.arange(900, 900 + ADDED))] if added else out


def mixed_loader(start: int | None = None) -> DataLoader:
    parts = datasets(start is not None)
    curriculum = [] if start is None else [(start, NEW_WEIGHTS)]
    mix = MixSampler.from_datasets(parts, WEIGHTS, seed=0, curriculum=curriculum)
    return DataLoader(tud.ConcatDataset(parts), sampler=mix, batch_size=3, seed=0)


def values(loader: Any, n: int) -> list[list[int]]:
    return [batch[0].tolist() for batch in take(loader, n)]


def test_the_loader_resumes_with_a_component_added_on_any_world_size() -> None:
    saved = mixed_loader().get_data_loader(repeat=True, skip=4, num_replicas=2, rank=1)
    state = saved.batch_sampler.state_dict()
    assert state["samples"] == 24
    grown = mixed_loader(24)
    check_reproducible(grown)
    straight = [
        v for batch in values(grown.get_data_loader(repeat=True, skip=8), 12) for v in batch
    ]
    assert any(v >= 900 for v in straight)
    for world in (1, 2, 3):
        ranks = []
        for rank in range(world):
            resumed = mixed_loader(24).get_data_loader(repeat=True, num_replicas=world, rank=rank)
            resumed.batch_sampler.load_state_dict(json.loads(json.dumps(state)))
            ranks.append(values(resumed, 12 // world))
        size = 3 * world
        for t, batch in enumerate(global_batches(ranks)):
            assert batch == sorted(straight[t * size : (t + 1) * size])
    with pytest.raises(ds.ReproducibilityError, match=r"samplers\[3:\] enter the mixture"):
        mixed_loader(23).get_data_loader(repeat=True).batch_sampler.load_state_dict(state)


def test_the_loader_resumes_with_a_curriculum_change_on_another_world_size() -> None:
    parts = datasets(False)

    def loader(curriculum: list[Any]) -> DataLoader:
        mix = MixSampler.from_datasets(parts, WEIGHTS, seed=0, curriculum=curriculum)
        return DataLoader(tud.ConcatDataset(parts), sampler=mix, batch_size=3, seed=0)

    state = loader([]).get_data_loader(repeat=True, skip=4, num_replicas=2, rank=0)
    state = state.batch_sampler.state_dict()
    resumed = loader([(24, [0, 0, 1])]).get_data_loader(repeat=True, num_replicas=3, rank=2)
    resumed.batch_sampler.load_state_dict(state)
    assert all(200 <= v < 203 for batch in values(resumed, 4) for v in batch)


# -- a curriculum change and a growth at the same resume ---------------------------------


def grown_mix(books: Any, **kwargs: Any) -> Any:
    web = ds.ReproducibleShuffleSampler(range(40), 1)
    return MixSampler([web, books], [3, 1], seed=0, **kwargs)


def grown_chain(books: Any, world: int, rank: int, skip: int = 0, **kwargs: Any) -> Any:
    shard = ds.DistributedSampler(grown_mix(books, **kwargs), world, rank)
    return ds.SkipBatchSampler(tud.BatchSampler(shard, 4, drop_last=False), skip)


def test_a_growth_and_a_curriculum_change_at_the_same_resume_are_accepted() -> None:
    small = ds.ReproducibleShuffleSampler(range(10), 2)
    state = grown_chain(small, 2, 1, skip=6).state_dict()  # mixture position 48
    at = state["mixture"]["consumed"][1]
    grown = GrowingShuffleSampler(range(16), 2, initial_length=10, growth=[(at, 16)])
    plan = [(48, [1, 1])]
    resumed = grown_chain(grown, 1, 0, curriculum=plan)
    resumed.load_state_dict(state)
    assert take(resumed, 10) == take(grown_chain(grown, 1, 0, skip=12, curriculum=plan), 10)
    mix = grown_mix(grown, curriculum=plan)
    positions = np.arange(48, dtype=np.int64)
    assert np.array_equal(mix.records(positions), grown_mix(small).records(positions))
    # Either change in the past is refused, each naming its own fix.
    with pytest.raises(ds.ReproducibilityError, match="curriculum changed before position 48"):
        grown_chain(grown, 1, 0, curriculum=[(47, [1, 1])]).load_state_dict(state)
    early = GrowingShuffleSampler(range(16), 2, initial_length=10, growth=[(at - 1, 16)])
    with pytest.raises(ValueError, match=r"growth position 11 of samplers\[1\] .* or later"):
        grown_chain(early, 1, 0, curriculum=plan).load_state_dict(state)


def test_a_growth_a_curriculum_change_and_an_added_component_through_the_loader() -> None:
    web = ds.ReproducibleShuffleSampler(range(40), 1)

    def loader(books: Any, length: int, extra: int = 0, plan: Any = ()) -> DataLoader:
        dataset = tud.TensorDataset(torch.arange(40 + length + extra))
        samplers = [web, books] + ([range(extra)] if extra else [])
        mix = MixSampler(samplers, [3, 1], seed=0, curriculum=plan)
        return DataLoader(dataset, sampler=mix, batch_size=4, seed=0)

    small = loader(ds.ReproducibleShuffleSampler(range(10), 2), 10)
    state = small.get_data_loader(repeat=True, skip=6).batch_sampler.state_dict()
    at, reached = state["mixture"]["consumed"][1], state["samples"]
    grown = GrowingShuffleSampler(range(16), 2, initial_length=10, growth=[(at, 16)])
    for extra, plan in ((0, [(reached, [1, 1])]), (5, [(reached + 4, [1, 1, 2])])):
        big = loader(grown, 16, extra, plan)
        check_reproducible(big)
        resumed = big.get_data_loader(repeat=True, num_replicas=2, rank=1)
        resumed.batch_sampler.load_state_dict(state)
        straight = big.get_data_loader(repeat=True, skip=3, num_replicas=2, rank=1)
        assert values(resumed, 6) == values(straight, 6)


def test_a_curriculum_change_loads_into_a_chain_on_another_world_size() -> None:
    state = chain(2, 1, 3, 4).state_dict()  # 24 samples
    plan = [(24, [0, 0, 1])]
    ranks = []
    for rank in range(3):
        resumed = chain(3, rank, 2, curriculum=plan)
        resumed.load_state_dict(state)
        ranks.append(take(resumed, 3))
    straight = [take(chain(1, 0, 6, 4, curriculum=plan), 3)]
    assert global_batches(ranks) == global_batches(straight)
    assert all(i >= 15 for batch in straight[0] for i in batch)


def test_a_second_component_may_be_added_at_a_later_resume() -> None:
    samplers = [ds.ReproducibleShuffleSampler(range(n), i) for i, n in enumerate([6, 4, 5, 3])]
    first = [(8, [1, 1, 1])]
    second = [*first, (20, [1, 1, 1, 3])]
    saving = mixture_chain(samplers[:3], [1, 1], curriculum=first)
    take(saving, 5)  # 20 positions
    resumed = mixture_chain(samplers, [1, 1], curriculum=second)
    resumed.load_state_dict(saving.state_dict())
    mix = MixSampler(samplers, [1, 1], 0, curriculum=second)
    assert take(resumed, 5) == [mix.records(np.arange(p, p + 4)).tolist() for p in range(20, 40, 4)]
    assert mix.progress(20)["consumed"] == [*saving.state_dict()["mixture"]["consumed"], 0]
    with pytest.raises(
        ds.ReproducibilityError, match=r"samplers\[3:\] enter the mixture at position 19"
    ):
        mixture_chain(samplers, [1, 1], curriculum=[*first, (19, [1, 1, 1, 3])]).load_state_dict(
            saving.state_dict()
        )
