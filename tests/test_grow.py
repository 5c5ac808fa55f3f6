"""GrowingShuffleSampler: a dataset that grows mid-run (NOTE [ growth law ])."""

from __future__ import annotations

from itertools import chain as chain_from_iterables
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import given
from hypothesis import strategies as st

import detsamplers as ds
from detsamplers import GrowingShuffleSampler
from detsamplers.loader import DataLoader, check_reproducible
from tests.helpers import take

History = list[tuple[int, int]]
chain_from = chain_from_iterables.from_iterable


@st.composite
def histories(draw: st.DrawFn, max_growths: int = 4) -> tuple[int, History]:
    """An initial length and growths, some on pass boundaries or at a pass's last offset."""
    initial = draw(st.integers(1, 40))
    growth: History = []
    position, length = 0, initial
    for _ in range(draw(st.integers(0, max_growths))):
        # Boundaries of the plain grid after ``position`` are likely picks: offset 0, N - 1.
        nxt = position + draw(
            st.one_of(st.integers(1, 3 * length), st.sampled_from([length, length - 1 or 1]))
        )
        length += draw(st.integers(1, 30))
        growth.append((nxt, length))
        position = nxt
    return initial, growth


def grower(initial: int, growth: History, seed: int = 0, **kwargs: Any) -> GrowingShuffleSampler:
    final = growth[-1][1] if growth else initial
    return GrowingShuffleSampler(
        range(final), seed, initial_length=initial, growth=growth, **kwargs
    )


def stream(initial: int, growth: History, count: int, seed: int = 0) -> list[int]:
    records = grower(initial, growth, seed).records(np.arange(count, dtype=np.int64))
    out: list[int] = records.tolist()
    return out


def reference_passes(initial: int, growth: History, count: int) -> list[tuple[int, int, int]]:
    """(start, end, length before the pass's growths) of each pass up to ``count``, by rule."""
    out = []
    start, length, pending = 0, initial, list(growth)
    while start < count:
        before, end = length, start + length
        while pending and pending[0][0] < end:
            length = pending.pop(0)[1]
            end = start + length
        out.append((start, end, before))
        start = end
    return out


# -- the law -----------------------------------------------------------------------------


@given(history=histories(), seed=st.integers(0, 2**40))
def test_every_pass_reads_each_record_of_its_final_length_exactly_once(
    history: tuple[int, History], seed: int
) -> None:
    initial, growth = history
    passes = reference_passes(initial, growth, 3 * (growth[-1][0] if growth else 1) + 200)
    records = stream(initial, growth, passes[-1][1], seed)
    for start, end, _ in passes:
        assert sorted(records[start:end]) == list(range(end - start))


@given(history=histories(), seed=st.integers(0, 2**40))
def test_a_growth_changes_nothing_before_its_position(
    history: tuple[int, History], seed: int
) -> None:
    initial, growth = history
    end = (growth[-1][0] if growth else 0) + 100
    full = stream(initial, growth, end, seed)
    for i, (at, _) in enumerate(growth):
        # The run that has not (yet) grown at ``at`` reads the same records before it.
        final = growth[i - 1][1] if i else initial
        earlier = GrowingShuffleSampler(
            range(final), seed, initial_length=initial, growth=growth[:i]
        )
        assert earlier.records(np.arange(at, dtype=np.int64)).tolist() == full[:at]


@given(history=histories(max_growths=1), seed=st.integers(0, 2**40))
def test_the_growing_pass_reads_the_unseen_old_records_and_the_new_ones_never_a_seen_one(
    history: tuple[int, History], seed: int
) -> None:
    initial, growth = history
    if not growth:
        return
    ((at, size),) = growth
    records = stream(initial, growth, at + size + initial, seed)
    start, end, before = next(p for p in reference_passes(initial, growth, at + 1) if p[1] > at)
    seen = records[start:at]
    rest = records[at:end]
    assert set(seen) <= set(range(before))
    assert len(set(seen)) == len(seen)
    assert sorted(rest) == sorted(set(range(size)) - set(seen))


@given(history=histories(), seed=st.integers(0, 2**40))
def test_passes_after_the_growth_are_plain_shuffles_of_the_new_length(
    history: tuple[int, History], seed: int
) -> None:
    initial, growth = history
    if not growth:
        return
    final = growth[-1][1]
    passes = reference_passes(initial, growth, growth[-1][0] + 3 * final)
    records = stream(initial, growth, passes[-1][1], seed)
    plain = ds.ReproducibleShuffleSampler(range(final), seed)
    for epoch, (start, end, before) in enumerate(passes):
        if start > growth[-1][0] and before == final:
            expected = plain.records(np.arange(epoch * final, (epoch + 1) * final))
            assert records[start:end] == expected.tolist()


@given(n=st.integers(1, 200), seed=st.integers(0, 2**40))
def test_without_growth_it_is_the_plain_shuffle_with_the_same_state(n: int, seed: int) -> None:
    plain = ds.RepeatSampler(ds.ReproducibleShuffleSampler(range(n), seed))
    same = ds.RepeatSampler(GrowingShuffleSampler(range(n), seed))
    assert take(plain, 3 * n) == take(same, 3 * n)
    assert plain.state_dict() == same.state_dict()


def test_several_growths_in_one_pass_chain_the_same_way() -> None:
    # Three growths inside pass 0 of 50 records: 20 read, +10; 40 read, +10; 45 read, +30.
    growth = [(20, 60), (40, 70), (45, 100)]
    records = stream(50, growth, 300)
    assert sorted(records[:100]) == list(range(100))
    assert set(records[:20]) <= set(range(50)) and set(records[20:40]) <= set(range(60))
    assert sorted(records[100:200]) == sorted(records[200:300]) == list(range(100))


def test_a_growth_on_a_pass_boundary_makes_the_next_pass_a_plain_shuffle() -> None:
    grown = stream(10, [(20, 15)], 50)
    before = stream(10, [], 20)
    plain = ds.ReproducibleShuffleSampler(range(15), 0)
    assert grown[:20] == before
    assert grown[20:35] == plain.records(np.arange(2 * 15, 3 * 15)).tolist()


def test_a_growth_at_a_pass_s_last_offset_reads_the_last_old_record_among_the_new() -> None:
    grown = stream(10, [(9, 14)], 28)
    last_old = stream(10, [], 10)[9]
    assert sorted(grown[9:14]) == sorted([last_old, 10, 11, 12, 13])
    assert sorted(grown[14:28]) == list(range(14))


def test_the_order_for_seed_0_is_pinned() -> None:
    # Golden: 8 records, 3 read ([7, 1, 2], as the plain shuffle), grown to 12: the other
    # five old records and the four new ones; then a pass of 12.
    assert stream(8, [], 3) == [7, 1, 2]
    assert stream(8, [(3, 12)], 24) == [
        7, 1, 2, 0, 8, 4, 10, 11, 9, 3, 6, 5,
        2, 10, 9, 3, 1, 0, 6, 11, 8, 7, 4, 5,
    ]  # fmt: skip


def test_the_exact_permutation_grows_under_the_same_law() -> None:
    grown = grower(30, [(7, 45), (50, 60)], 4, permutation="exact")
    records = grown.records(np.arange(45 + 60, dtype=np.int64)).tolist()
    assert sorted(records[:45]) == list(range(45))
    assert sorted(records[45:]) == list(range(60))


def test_a_bare_growing_shuffle_yields_one_pass_of_its_length_per_iteration() -> None:
    grown = grower(4, [(2, 6), (6, 9)])
    assert [len(list(grown)) for _ in range(3)] == [6, 9, 9]


# -- resume and elastic -----------------------------------------------------------------


def chain(
    initial: int, growth: History, world: int, rank: int, batch: int, skip: int = 0
) -> ds.SkipBatchSampler:
    shard = ds.DistributedSampler(ds.RepeatSampler(grower(initial, growth, 5)), world, rank)
    return ds.SkipBatchSampler(tud.BatchSampler(shard, batch, drop_last=False), skip)


def global_batches(initial: int, growth: History, world: int, batch: int, count: int) -> list:
    ranks = [take(chain(initial, growth, world, r, batch), count) for r in range(world)]
    return [sorted(chain_from(ranks[r][b] for r in range(world))) for b in range(count)]


@given(history=histories(), split=st.sampled_from([(1, 6), (2, 3), (3, 2), (6, 1)]))
def test_the_global_batches_are_the_same_on_any_world_size(
    history: tuple[int, History], split: tuple[int, int]
) -> None:
    initial, growth = history
    world, batch = split
    count = ((growth[-1][0] if growth else 0) + 60) // 6
    assert global_batches(initial, growth, world, batch, count) == global_batches(
        initial, growth, 1, 6, count
    )


def test_a_resume_from_every_position_continues_the_straight_run() -> None:
    growth = [(7, 13), (20, 21), (33, 30)]
    straight = take(chain(9, growth, 2, 1, 2), 40)
    for position in range(40):
        saver = chain(9, growth, 2, 1, 2, skip=position)
        resumed = chain(9, growth, 2, 1, 2)
        resumed.load_state_dict(saver.state_dict())
        assert take(resumed, 40 - position) == straight[position:]


@given(history=histories(max_growths=2), data=st.data())
def test_a_state_saved_before_a_growth_resumes_on_the_grown_dataset(
    history: tuple[int, History], data: st.DataObject
) -> None:
    initial, growth = history
    world, batch = data.draw(st.sampled_from([(1, 4), (2, 2), (4, 1)]))
    skip = data.draw(st.integers(0, 30))
    saver = chain(initial, growth, world, 0, batch, skip=skip)
    state = saver.state_dict()
    reached = state["samples"]
    last = growth[-1][1] if growth else initial
    grown = [*growth, (max(reached, growth[-1][0] + 1 if growth else 1), last + 7)]
    resumed = chain(initial, grown, world, 0, batch)
    resumed.load_state_dict(state)
    assert take(resumed, 20) == take(chain(initial, grown, world, 0, batch, skip=skip), 20)


def test_a_grown_state_resumes_elastically_with_another_world_size() -> None:
    growth = [(10, 25)]
    saver = chain(12, growth, 2, 0, 3, skip=4)  # 24 samples read
    state = saver.state_dict()
    grown = [*growth, (24, 40)]
    resumed = [chain(12, grown, 3, r, 2) for r in range(3)]
    for r in resumed:
        r.load_state_dict(state)
    after = sorted(chain_from(take(r, 1)[0] for r in resumed))
    straight = chain(12, grown, 1, 0, 6, skip=4)
    assert after == sorted(take(straight, 1)[0])


def test_a_resume_that_drops_or_changes_a_growth_is_a_reproducibility_error() -> None:
    state = chain(12, [(10, 25)], 1, 0, 4, skip=5).state_dict()
    for other in ([], [(10, 26)], [(11, 25)]):
        with pytest.raises(ds.ReproducibilityError, match="growth history differs"):
            chain(12, other, 1, 0, 4).load_state_dict(state)


def test_a_growth_recorded_in_the_saved_run_s_past_is_a_value_error() -> None:
    state = chain(12, [], 1, 0, 4, skip=5).state_dict()  # 20 samples read
    with pytest.raises(
        ValueError,
        match=r"growth position 19 \(to 30 records\) should be at least 20, the position the "
        r"saved run had reached.*record it as \(20, 30\) or later",
    ):
        chain(12, [(19, 30)], 1, 0, 4).load_state_dict(state)


# -- mixtures -----------------------------------------------------------------------------


def test_a_mixture_component_grows_at_its_own_position() -> None:
    plain = ds.MixSampler([ds.ReproducibleShuffleSampler(range(20), 1), range(5)], [3, 1], seed=0)
    at = plain.progress(40)["consumed"][0]  # component 0 has read 30 records: 1.5 passes
    grown = ds.MixSampler(
        [GrowingShuffleSampler(range(26), 1, initial_length=20, growth=[(at, 26)]), range(5)],
        [3, 1],
        seed=0,
    )
    assert take(grown, 40) == [i if i < 20 else i + 6 for i in take(plain, 40)]
    component, position = grown.locate(np.arange(400, dtype=np.int64))
    records = grown.records(np.arange(400, dtype=np.int64))[component == 0]
    assert np.array_equal(position[component == 0], np.arange(len(records)))
    assert sorted(records[20:46].tolist()) == list(range(26))  # the growing pass
    assert sorted(records[46:72].tolist()) == list(range(26))


def mixed_chain(books: Any, world: int, rank: int, skip: int = 0) -> ds.SkipBatchSampler:
    web = ds.ReproducibleShuffleSampler(range(40), 1)
    mix = ds.MixSampler([books, web], [1, 3], seed=0)
    shard = ds.DistributedSampler(mix, world, rank)
    return ds.SkipBatchSampler(tud.BatchSampler(shard, 4, drop_last=False), skip)


def test_a_mixture_state_saved_before_a_component_grew_resumes_on_the_grown_one() -> None:
    small = ds.ReproducibleShuffleSampler(range(10), 2)
    state = mixed_chain(small, 2, 1, skip=6).state_dict()  # mixture position 48
    at = state["mixture"]["consumed"][0]
    assert at == 12
    grown = GrowingShuffleSampler(range(16), 2, initial_length=10, growth=[(at, 16)])
    resumed = mixed_chain(grown, 1, 0)
    resumed.load_state_dict(state)
    straight = mixed_chain(grown, 1, 0, skip=12)
    assert take(resumed, 10) == take(straight, 10)
    late = GrowingShuffleSampler(range(16), 2, initial_length=10, growth=[(at - 1, 16)])
    with pytest.raises(ValueError, match=r"growth position 11 of samplers\[0\] \(to 16 records\)"):
        mixed_chain(late, 1, 0).load_state_dict(state)
    other = GrowingShuffleSampler(range(16), 3, initial_length=10, growth=[(at, 16)])
    with pytest.raises(ds.ReproducibilityError, match="mix components"):
        mixed_chain(other, 1, 0).load_state_dict(state)


# -- the loader -----------------------------------------------------------------------------


def loader(initial: int, growth: History, records: int) -> DataLoader:
    dataset = tud.TensorDataset(torch.arange(records))
    sampler = GrowingShuffleSampler(
        tud.SequentialSampler(dataset), 3, initial_length=initial, growth=growth
    )
    return DataLoader(dataset, sampler=sampler, batch_size=4, seed=3)


def test_the_loader_resumes_a_state_saved_before_the_growth_on_the_grown_dataset() -> None:
    small = loader(30, [], 30)
    check_reproducible(small)
    saved = small.get_data_loader(repeat=True, skip=5, num_replicas=2, rank=0)
    state = saved.batch_sampler.state_dict()
    assert state["samples"] == 40
    big = loader(30, [(40, 50)], 50)
    check_reproducible(big)
    resumed = big.get_data_loader(repeat=True, num_replicas=1, rank=0)
    resumed.batch_sampler.load_state_dict(state)
    batches = iter(resumed)
    after = [[int(i) for i in next(batches)[0]] for _ in range(10)]  # samples 40..79
    straight = big.get_data_loader(repeat=True, skip=10, num_replicas=1, rank=0)
    assert after == [[int(i) for i in b[0]] for b in take(straight, 10)]
    records = take_records(big, 40) + list(chain_from(after))
    assert records[:40] == take_records(small, 40)
    # Pass 1 grew at its offset 10 (sample 40): it is 50 long, each record once.
    assert sorted(records[30:80]) == list(range(50))


def take_records(source: DataLoader, count: int) -> list[int]:
    batches = source.get_data_loader(repeat=True).batch_sampler
    return [i for b in take(batches, count // 4) for i in b]


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"growth": [(5, 8)]}, ValueError, r"growth\[0\] new_length should be greater than 10"),
        ({"growth": [(5, 10)]}, ValueError, r"growth\[0\] new_length should be greater than 10"),
        ({"growth": [(5, 12), (5, 14)]}, ValueError, r"growth\[1\] position should be greater"),
        ({"growth": [(0, 12)]}, ValueError, r"growth\[0\] position should be a positive integer"),
        ({"growth": [(2.0, 12)]}, TypeError, r"growth\[0\] position should be a positive integer"),
        ({"growth": [(True, 12)]}, TypeError, r"growth\[0\] position should be a positive"),
        ({"growth": [(3, "12")]}, TypeError, r"growth\[0\] new_length should be a positive"),
        ({"growth": [3, 12]}, TypeError, r"growth\[0\] should be a \(position, new_length\)"),
        ({"growth": "3"}, TypeError, r"growth should be a list of \(position, new_length\)"),
        ({"growth": [(3, 14)]}, ValueError, r"should have the last growth's new_length \(14\)"),
        ({"initial_length": 1.5}, TypeError, r"initial_length should be a positive integer"),
    ],
)
def test_bad_growth_is_refused_with_a_message_naming_it(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    arguments = {"initial_length": 10, **kwargs}
    with pytest.raises(error, match=message):
        GrowingShuffleSampler(range(12), 0, **arguments)


def test_an_empty_sampler_is_refused() -> None:
    with pytest.raises(ValueError, match="sampler should have at least one record"):
        GrowingShuffleSampler(range(0), 0)


def test_growth_without_an_initial_length_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="missing initial_length"):
        GrowingShuffleSampler(range(12), 0, growth=[(3, 12)])


def test_a_growing_shuffle_over_another_stage_is_refused() -> None:
    with pytest.raises(ValueError, match="should wrap the dataset's records"):
        GrowingShuffleSampler(ds.ReproducibleShuffleSampler(range(5), 0), 0)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda g: ds.DistributedSampler(g, 2, 0),
        lambda g: ds.ReproducibleShuffleSampler(g, 0),
        lambda g: ds.SkipSampler(g, 1),
        lambda g: ds.RepeatBatchSampler(tud.BatchSampler(g, 2, False)),
    ],
)
def test_only_a_repeat_may_wrap_a_shuffle_that_grew(wrap: Any) -> None:
    with pytest.raises(ValueError, match=r"whose dataset grew mid-run.*only a repeat may wrap it"):
        wrap(grower(4, [(2, 6)]))
    wrap(grower(6, []))  # no growth: a plain shuffle, wrapped as any


def test_a_loader_over_a_grown_dataset_refuses_validation_passes() -> None:
    with pytest.raises(ValueError, match="only a repeat may wrap it"):
        len(loader(30, [(40, 50)], 50))


def test_the_loader_resumes_a_mixture_whose_last_component_grew() -> None:
    web = ds.ReproducibleShuffleSampler(range(40), 1)

    def mixed_loader(books: Any, length: int) -> DataLoader:
        dataset = tud.TensorDataset(torch.arange(40 + length))
        mix = ds.MixSampler([web, books], [3, 1], seed=0)
        return DataLoader(dataset, sampler=mix, batch_size=4, seed=0)

    small = mixed_loader(ds.ReproducibleShuffleSampler(range(10), 2), 10)
    state = small.get_data_loader(repeat=True, skip=6).batch_sampler.state_dict()
    at = state["mixture"]["consumed"][1]
    grown = GrowingShuffleSampler(range(16), 2, initial_length=10, growth=[(at, 16)])
    big = mixed_loader(grown, 16)
    check_reproducible(big)
    resumed = big.get_data_loader(repeat=True, num_replicas=2, rank=1)
    resumed.batch_sampler.load_state_dict(state)
    straight = big.get_data_loader(repeat=True, skip=3, num_replicas=2, rank=1)
    assert [b[0].tolist() for b in take(resumed, 5)] == [b[0].tolist() for b in take(straight, 5)]
