"""MixSampler: the mixture law, exactly-once per component pass, resume, elastic, curriculum."""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import detsamplers as ds
from detsamplers import MixSampler
from detsamplers.loader import check_reproducible
from tests.helpers import take

LENGTHS = [10, 5, 3]
WEIGHTS = [0.6, 0.25, 0.15]


def weights_strategy(k: int) -> st.SearchStrategy[list[float]]:
    weight = st.one_of(st.just(0.0), st.floats(0.05, 10), st.integers(1, 9).map(float))
    return st.lists(weight, min_size=k, max_size=k).filter(lambda w: sum(w) > 0)


def mixture(lengths: list[int], weights: list[float], seed: int = 0, **kwargs: Any) -> MixSampler:
    samplers = [ds.ReproducibleShuffleSampler(range(n), seed + i) for i, n in enumerate(lengths)]
    return MixSampler(samplers, weights, seed, **kwargs)


def split(values: list[int], lengths: list[int]) -> tuple[list[int], list[int]]:
    """Component and record of each concatenated index."""
    bounds = np.cumsum(lengths)
    component = np.searchsorted(bounds, values, side="right")
    record = np.asarray(values) - np.concatenate([[0], bounds])[component]
    return component.tolist(), record.tolist()


# -- the law -----------------------------------------------------------------------------


@given(data=st.data(), k=st.integers(1, 5), seed=st.integers(0, 2**40))
def test_every_window_gives_each_component_its_share_to_within_one_item(
    data: st.DataObject, k: int, seed: int
) -> None:
    weights = data.draw(weights_strategy(k))
    window = data.draw(st.one_of(st.none(), st.integers(1, 300)))
    try:
        mix = mixture([7] * k, weights, seed, window=window)
    except ValueError as error:  # a share too small for the window: the error says so
        assert "rounds to none" in str(error)
        return
    size = mix.window
    windows = 6
    component, _ = mix.locate(np.arange(windows * size, dtype=np.int64))
    shares = np.asarray(weights) / sum(weights)
    for j in range(windows):
        counts = np.bincount(component[j * size : (j + 1) * size], minlength=k)
        assert counts.tolist() == mix.counts
        assert (np.abs(counts - size * shares) < 1).all()
        assert ((counts > 0) == (shares > 0)).all()


@given(data=st.data(), k=st.integers(1, 4), seed=st.integers(0, 2**40))
def test_each_component_advances_through_its_own_chain_in_order(
    data: st.DataObject, k: int, seed: int
) -> None:
    weights = data.draw(weights_strategy(k))
    lengths = data.draw(st.lists(st.integers(1, 12), min_size=k, max_size=k))
    window = data.draw(st.sampled_from([None, 7, 64]))
    assume(window is None or min(w for w in weights if w) * window >= sum(weights))
    mix = mixture(lengths, weights, seed, window=window)
    start = data.draw(st.integers(0, 10**6))
    component, position = mix.locate(np.arange(start, start + 400, dtype=np.int64))
    before = mix.progress(start)["consumed"]
    for c in range(k):
        mine = position[component == c]
        assert mine.tolist() == list(range(before[c], before[c] + len(mine)))


@given(seed=st.integers(0, 2**40), data=st.data())
def test_each_component_yields_its_records_exactly_once_per_pass_at_its_own_pace(
    seed: int, data: st.DataObject
) -> None:
    lengths = data.draw(st.lists(st.integers(1, 9), min_size=2, max_size=4))
    weights = data.draw(weights_strategy(len(lengths)))
    mix = mixture(lengths, weights, seed)
    stream = take(mix, 300)
    component, record = split(stream, lengths)
    progress = mix.progress(300)
    for c, n in enumerate(lengths):
        mine = [r for comp, r in zip(component, record, strict=True) if comp == c]
        assert len(mine) == progress["consumed"][c]
        assert progress["epochs"][c] == len(mine) // n
        for e in range(len(mine) // n):
            assert sorted(mine[e * n : (e + 1) * n]) == list(range(n))


def test_a_seek_far_away_computes_the_same_items_as_one_by_one() -> None:
    mix = mixture([10**9, 10**9, 10**9], WEIGHTS, 5)
    start = 10**12
    block = mix.records(np.arange(start, start + 50, dtype=np.int64)).tolist()
    single = [int(mix.records(np.array([p]))[0]) for p in range(start, start + 50)]
    assert block == single == take(ds.SkipSampler(mix, start), 50)
    assert mix.progress(start)["consumed"] == [6 * 10**11, 2.5 * 10**11, 1.5 * 10**11]


@settings(max_examples=30)
@given(seed=st.integers(0, 2**40), data=st.data())
def test_any_set_of_positions_maps_as_each_position_alone(seed: int, data: st.DataObject) -> None:
    plan = [(37, [0, 1, 3]), (90, [5, 1, 1])] if data.draw(st.booleans()) else []
    mix = mixture(LENGTHS, WEIGHTS, seed, curriculum=plan)
    positions = data.draw(st.lists(st.integers(0, 400), min_size=1, max_size=60))
    block = np.asarray(positions, dtype=np.int64)
    single = [int(mix.records(np.array([p], dtype=np.int64))[0]) for p in positions]
    assert mix.records(block).tolist() == single
    run = np.arange(positions[0], positions[0] + 70, dtype=np.int64)
    assert mix.records(run).tolist() == mix._gather(*mix.locate(run)).tolist()


@settings(max_examples=40)
@given(
    seed=st.integers(0, 2**40),
    first=st.integers(0, 10**13),
    stride=st.integers(2, 300),
    count=st.integers(3, 400),
    data=st.data(),
)
def test_a_ranks_block_maps_as_each_position_alone(
    seed: int, first: int, stride: int, count: int, data: st.DataObject
) -> None:
    # Positions first + i * stride: a rank's block under a shard (locate_stride), across
    # windows, component passes and, with a curriculum, a segment's start.
    plan = [(first + stride * count // 2, [0, 1, 3])] if data.draw(st.booleans()) else []
    window = data.draw(st.one_of(st.none(), st.integers(20, 200)))
    shuffled = data.draw(st.booleans())
    lengths = data.draw(st.sampled_from([LENGTHS, [1000, 300, 200]]))
    samplers = [
        ds.ReproducibleShuffleSampler(range(n), seed + i) if shuffled else range(n)
        for i, n in enumerate(lengths)
    ]
    mix = MixSampler(samplers, WEIGHTS, seed, window=window, curriculum=plan)
    positions = first + stride * np.arange(count, dtype=np.int64)
    got = mix.records(positions).tolist()
    assert got == mix._gather(*mix.locate(positions)).tolist()
    picked = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=10))
    assert [got[i] for i in picked] == [int(mix.records(positions[i : i + 1])[0]) for i in picked]
    segment = mix._segments[0]
    if not plan:
        component, position = segment.locate_stride(first, stride, count)
        expected = segment.locate(positions)  # the general path
        assert (component.tolist(), position.tolist()) == (
            expected[0].tolist(),
            expected[1].tolist(),
        )


def test_positions_with_consecutive_ends_but_gaps_inside_are_not_a_run() -> None:
    mix = mixture(LENGTHS, WEIGHTS, 0)
    for positions in ([20, 0, 22], [5, 9, 6, 7, 8], [3, 3, 5]):
        block = mix.records(np.asarray(positions, dtype=np.int64)).tolist()
        assert block == [int(mix.records(np.array([p]))[0]) for p in positions]


def test_the_order_in_which_arrangements_are_first_used_changes_nothing() -> None:
    early, late = mixture(LENGTHS, WEIGHTS, 4), mixture(LENGTHS, WEIGHTS, 4)
    far = np.arange(10**12, 10**12 + 5000, 7, dtype=np.int64)
    near = np.arange(3000, dtype=np.int64)
    first = (early.records(near).tolist(), early.records(far).tolist())
    second = late.records(far).tolist()
    assert first == (late.records(near).tolist(), second)


def test_the_default_window_is_the_common_denominator_of_the_weights() -> None:
    assert (mixture(LENGTHS, WEIGHTS).window, mixture(LENGTHS, WEIGHTS).counts) == (20, [12, 5, 3])
    assert mixture(LENGTHS, [1, 1, 1]).window == 3
    assert mixture(LENGTHS, [2, 2, 4]).counts == [1, 1, 2]
    irregular = mixture(LENGTHS, [0.3721, 0.5, 0.1279 + 1e-7])
    assert irregular.window == 1024 and sum(irregular.counts) == 1024
    assert mixture(LENGTHS, WEIGHTS, window=100).counts == [60, 25, 15]


def test_the_interleaving_depends_on_the_seed_and_on_the_window() -> None:
    a = mixture(LENGTHS, WEIGHTS, 0).locate(np.arange(200))[0].reshape(10, 20)
    b = MixSampler([range(n) for n in LENGTHS], WEIGHTS, 1).locate(np.arange(200))[0]
    assert len({row.tobytes() for row in a}) == 10
    assert not np.array_equal(a.ravel(), b)


# -- composition, resume, elastic ---------------------------------------------------------


def mixed_batches(world: int, rank: int, size: int, skip: int, **kwargs: Any) -> Any:
    datasets = [range(n) for n in LENGTHS]
    return ds.make_mixed_batch_sampler(datasets, WEIGHTS, 3, world, rank, size, skip, **kwargs)


@settings(max_examples=8)
@given(world=st.integers(1, 3), size=st.integers(1, 3), data=st.data())
def test_resuming_from_every_position_of_a_small_mixture_continues_the_straight_run(
    world: int, size: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    horizon = 30
    straight = take(mixed_batches(world, rank, size, 0), horizon + 3)
    for skip in range(horizon):
        assert take(mixed_batches(world, rank, size, skip), 3) == straight[skip : skip + 3]
    chain = mixed_batches(world, rank, size, 0)
    iterator = iter(chain)
    for consumed in range(horizon):
        state = json.loads(json.dumps(chain.state_dict()))
        restored = mixed_batches(world, rank, size, 0)
        restored.load_state_dict(state)
        assert take(restored, 3) == straight[consumed : consumed + 3]
        next(iterator)


def global_batches(world: int, size: int, skip: int, count: int) -> list[list[int]]:
    ranks = [take(mixed_batches(world, r, size, skip), count) for r in range(world)]
    return [[ranks[r][t][i] for i in range(size) for r in range(world)] for t in range(count)]


@settings(max_examples=25)
@given(global_batch=st.sampled_from([2, 4, 6, 12]), skip=st.integers(0, 30), data=st.data())
def test_w_ranks_then_w_prime_ranks_see_the_same_global_batches(
    global_batch: int, skip: int, data: st.DataObject
) -> None:
    divisors = [w for w in range(1, global_batch + 1) if global_batch % w == 0]
    a, b = data.draw(st.sampled_from(divisors)), data.draw(st.sampled_from(divisors))
    first = global_batches(a, global_batch // a, skip, 5)
    second = global_batches(b, global_batch // b, skip, 5)
    assert first == second


def test_a_rank_computes_only_its_own_positions() -> None:
    mix = mixture(LENGTHS, WEIGHTS, 2)
    stream = take(mix, 120)
    for rank in range(4):
        assert (
            take(ds.DistributedSampler(mixture(LENGTHS, WEIGHTS, 2), 4, rank), 30)
            == (stream[rank::4])
        )


def test_the_state_shows_each_components_progress_and_epochs() -> None:
    chain = mixed_batches(2, 1, 4, 5)
    state = chain.state_dict()
    # Rank 1 at batch 5: rank 0's next record is mixture position 5 * 4 * 2 = 40.
    assert state["mixture"] == {"position": 40, "consumed": [24, 10, 6], "epochs": [2, 2, 2]}
    assert state["chain"][0]["lengths"] == LENGTHS


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"weights": [0.5, 0.35, 0.15]}, "mix weights"),
        ({"lengths": [10, 6, 3]}, "mix lengths"),
        ({"seed": 4}, "mix seed"),
        ({"window": 40}, "mix window"),
    ],
)
def test_loading_a_state_into_a_changed_mixture_names_what_changed(
    change: dict[str, Any], named: str
) -> None:
    options: dict[str, Any] = {"weights": WEIGHTS, "lengths": LENGTHS, "seed": 3, "window": None}
    saved = mixed_batches(1, 0, 4, 2).state_dict()
    options.update(change)
    datasets = [range(n) for n in options["lengths"]]
    chain = ds.make_mixed_batch_sampler(
        datasets, options["weights"], options["seed"], 1, 0, 4, window=options["window"]
    )
    with pytest.raises(ds.ReproducibilityError, match=named):
        chain.load_state_dict(saved)


def test_a_changed_component_seed_is_named_in_the_error() -> None:
    def build(seed: int) -> Any:
        samplers = [ds.ReproducibleShuffleSampler(range(n), seed) for n in LENGTHS]
        return ds.SkipSampler(MixSampler(samplers, WEIGHTS, 0), 3)

    with pytest.raises(ds.ReproducibilityError, match="mix seeds"):
        build(1).load_state_dict(build(2).state_dict())


# -- curriculum -------------------------------------------------------------------------


@given(
    seed=st.integers(0, 2**40),
    starts=st.lists(st.integers(1, 300), min_size=1, max_size=4, unique=True),
    data=st.data(),
)
def test_a_curriculum_switches_weights_without_losing_or_repeating_a_record(
    seed: int, starts: list[int], data: st.DataObject
) -> None:
    plan = [(s, data.draw(weights_strategy(3))) for s in sorted(starts)]
    mix = mixture(LENGTHS, WEIGHTS, seed, curriculum=plan)
    component, position = mix.locate(np.arange(400, dtype=np.int64))
    for c in range(3):
        mine = position[component == c]
        assert mine.tolist() == list(range(len(mine)))
    bounds = [0, *sorted(starts), 400]
    for (lo, hi), weights in zip(pairwise(bounds), [WEIGHTS] + [w for _, w in plan], strict=True):
        used = set(component[lo:hi].tolist())
        assert all(weights[c] > 0 for c in used)


def test_segments_before_the_switch_keep_their_order() -> None:
    plain = mixture(LENGTHS, WEIGHTS, 1)
    switched = mixture(LENGTHS, WEIGHTS, 1, curriculum=[(57, [0, 1, 1])])
    assert take(plain, 57) == take(switched, 57)
    assert all(i >= 10 for i in take(ds.SkipSampler(switched, 57), 40))


def test_a_curriculum_may_be_extended_at_a_resume_from_the_saved_position_on() -> None:
    saved = mixed_batches(2, 0, 4, 5).state_dict()  # mixture position 40 reached
    later = mixed_batches(2, 0, 4, 0, curriculum=[(40, [0, 0, 1])])
    later.load_state_dict(saved)
    assert all(i >= 15 for batch in take(later, 3) for i in batch)
    assert take(mixed_batches(2, 0, 4, 5), 1) != take(later, 1)
    earlier = mixed_batches(2, 0, 4, 0, curriculum=[(39, [0, 0, 1])])
    with pytest.raises(ds.ReproducibilityError, match="curriculum changed before position 40"):
        earlier.load_state_dict(saved)


# -- golden orders ----------------------------------------------------------------------


def test_this_mixture_yields_these_items_for_seed_0() -> None:
    assert take(mixture(LENGTHS, WEIGHTS, 0), 20) == GOLDEN_MIX


def test_the_mixed_training_chain_yields_these_batches_at_a_billion_batches() -> None:
    datasets = [range(10**9), range(10**6), range(1000)]
    chain = ds.make_mixed_batch_sampler(datasets, WEIGHTS, 42, 4, 3, 4, 10**9)
    assert take(chain, 2) == GOLDEN_BILLION


GOLDEN_MIX = [10, 7, 1, 12, 2, 14, 8, 16, 6, 5, 9, 13, 15, 0, 3, 17, 4, 11, 2, 4]
GOLDEN_BILLION = [
    [1001000376, 1000795601, 184556841, 13268568],
    [1001000624, 1000403827, 1000483911, 1001000125],
]


# -- loaders ----------------------------------------------------------------------------


def tensor_datasets() -> list[tud.TensorDataset]:
    return [tud.TensorDataset(torch.arange(n) + 100 * k) for k, n in enumerate(LENGTHS)]


def test_items_from_component_k_come_from_dataset_k_through_torchs_dataloader() -> None:
    datasets = tensor_datasets()
    expected = take(ds.make_mixed_batch_sampler(datasets, WEIGHTS, 0, 1, 0, 5), 8)
    batches = ds.make_mixed_batch_sampler(datasets, WEIGHTS, 0, 1, 0, 5)
    loader = tud.DataLoader(tud.ConcatDataset(datasets), batch_sampler=batches)
    for indices, (values,) in zip(expected, take(loader, 8), strict=True):
        component, record = split(indices, LENGTHS)
        assert values.tolist() == [100 * c + r for c, r in zip(component, record, strict=True)]
    check_reproducible(loader)


def test_check_reproducible_flags_a_mixture_over_the_wrong_dataset() -> None:
    mix = MixSampler.from_datasets(tensor_datasets(), WEIGHTS, 0)
    loader = tud.DataLoader(tensor_datasets()[0], sampler=mix)
    with pytest.raises(ds.ReproducibilityError, match=r"have \[10, 5, 3\] records \(18 in all\)"):
        check_reproducible(loader)
    check_reproducible(mix)


# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "error", "message"),
    [
        ([1, -1, 1], ValueError, r"weights\[1\] should be a finite non-negative number"),
        ([0, 0, 0], ValueError, "weights should have a positive sum"),
        ([1, float("nan"), 1], ValueError, r"weights\[1\] should be a finite .*=nan"),
        ([1, float("inf"), 1], ValueError, r"weights\[1\] should be a finite .*=inf"),
        ([1, 1], ValueError, r"one weight per sampler \(3\), but got 2"),
        ([True, 1, 1], TypeError, r"weights\[0\] should be a non-negative number, but got True"),
        ("abc", TypeError, "weights should be a sequence of 3 non-negative numbers"),
        ([1, "1", 1], TypeError, r"weights\[1\] should be a non-negative number"),
        ([1, 1, 1e-6], ValueError, r"weights\[2\] is a share of 5e-07, below what a window"),
        ([1, 1, 2e-4], ValueError, r"rounds to none of the window's 1024 .* at least 10001"),
    ],
)
def test_bad_weights_are_refused_naming_the_weight(
    weights: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        MixSampler([range(n) for n in LENGTHS], weights, 0)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"samplers": []}, ValueError, "samplers should hold at least one sampler"),
        ({"samplers": range(3)}, TypeError, "samplers should be a list of samplers"),
        ({"seed": True}, TypeError, "seed should be an integer value, but got seed=True"),
        ({"window": 0}, ValueError, "window should be a positive integer value"),
        ({"window": True}, TypeError, "window should be a positive integer value"),
        ({"window": 2**17}, ValueError, r"window should be an integer in \[1, 65536\]"),
        ({"curriculum": [(0, WEIGHTS)]}, ValueError, r"curriculum\[0\] start should be a pos"),
        ({"curriculum": [(5, WEIGHTS), (5, WEIGHTS)]}, ValueError, "should be greater than 5"),
        ({"curriculum": [(5, [1, 1])]}, ValueError, r"curriculum\[0\] weights should have one"),
        ({"curriculum": [5]}, TypeError, r"curriculum\[0\] should be a \(start, weights\) pair"),
        ({"curriculum": "ab"}, TypeError, "curriculum should be a list"),
    ],
)
def test_bad_arguments_are_refused_naming_the_parameter(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    options: dict[str, Any] = {"samplers": [range(n) for n in LENGTHS], "weights": WEIGHTS}
    options["seed"] = 0
    options.update(kwargs)
    samplers, weights, seed = options.pop("samplers"), options.pop("weights"), options.pop("seed")
    with pytest.raises(error, match=message):
        MixSampler(samplers, weights, seed, **options)


def test_an_empty_component_needs_weight_zero() -> None:
    with pytest.raises(ValueError, match=r"samplers\[1\] is empty but weights\[1\] is positive"):
        MixSampler([range(3), range(0)], [1, 1], 0)
    with pytest.raises(ValueError, match=r"curriculum\[0\] weights\[1\] is positive"):
        MixSampler([range(3), range(0)], [1, 0], 0, curriculum=[(4, [1, 1])])
    assert take(MixSampler([range(3), range(0)], [1, 0], 0), 4) == [0, 1, 2, 0]


@pytest.mark.parametrize(
    ("component", "message"),
    [
        (ds.DistributedSampler(ds.RepeatSampler(range(4)), 2, 0), "which is sharded"),
        (ds.SkipSampler(ds.RepeatSampler(range(4)), 1), "contains a skip"),
        (tud.BatchSampler(range(4), 2, False), "which yields batches"),
        (tud.RandomSampler(range(4)), r"\(RandomSampler\), which cannot seek: the mixture"),
        (ds.RepeatSampler(tud.RandomSampler(range(4))), r"\(RandomSampler\), which cannot seek"),
        (MixSampler([range(2)], [1], 0), "already a mixture"),
        (
            np.array([3, 1, 2]),
            r"whose indices are a sequence of 3 values, not range\(len\(dataset\)\) or "
            r"SequentialSampler\(dataset\).*mix range\(len\(part\)\) with part = "
            r"torch\.utils\.data\.Subset\(dataset, indices\)",
        ),
        (
            ds.ReproducibleShuffleSampler(range(2, 9), 0),
            r"whose indices are range\(2, 9\), not range\(len\(dataset\)\)",
        ),
        (
            tud.TensorDataset(torch.arange(4)),
            r"samplers\[1\], a dataset \(TensorDataset\) rather than a sampler of its "
            r"indices: pass range\(len\(dataset\)\) or SequentialSampler\(dataset\)",
        ),
        (tud.Subset(range(9), [1, 2]), r"a dataset \(Subset\).*MixSampler\.from_datasets"),
    ],
)
def test_misordered_chains_are_refused_at_construction(component: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MixSampler([range(3), component], [1, 1], 0)


@pytest.mark.parametrize("stage", [ds.RepeatSampler, lambda s: ds.ReproducibleShuffleSampler(s, 0)])
def test_nothing_may_repeat_or_shuffle_a_mixture(stage: Any) -> None:
    with pytest.raises(ValueError, match="contains a MixSampler: a mixture is already endless"):
        stage(MixSampler([range(3)], [1], 0))


def test_any_addressable_chain_over_a_whole_dataset_is_a_component() -> None:
    dataset = tud.TensorDataset(torch.arange(6))
    components = [
        tud.SequentialSampler(dataset),
        ds.ReproducibleShuffleSampler(tud.SequentialSampler(dataset), 1),
        ds.RepeatSampler(ds.ReproducibleShuffleSampler(range(6), 2, permutation="exact")),
        range(0, 6, 1),
    ]
    for component in components:
        mix = MixSampler([component, range(3)], [2, 1], 0)
        assert mix.lengths == [6, 3]
        first = take(mix, 18)
        assert sorted(i for i in first if i < 6) == sorted(list(range(6)) * 2)


def test_a_repeated_component_is_accepted_and_its_set_epoch_is_frozen() -> None:
    shuffle = ds.ReproducibleShuffleSampler(range(4), 0)
    mix = MixSampler([ds.RepeatSampler(shuffle), range(2)], [1, 1], 0)
    assert mix.lengths == [4, 2]
    with pytest.raises(ValueError, match="set_epoch cannot be used"):
        shuffle.set_epoch(1)
    bare = ds.ReproducibleShuffleSampler(range(4), 0)
    MixSampler([bare], [1], 0)
    with pytest.raises(ValueError, match="because a MixSampler wraps it"):
        bare.set_epoch(1)


def test_make_mixed_batch_sampler_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="batch_size should be a positive integer value"):
        ds.make_mixed_batch_sampler([range(3)], [1], 0, 1, 0, 0)
    with pytest.raises(ValueError, match=r"rank should be an integer in \[0, num_workers\)"):
        ds.make_mixed_batch_sampler([range(3)], [1], 0, 2, 2, 1)
    with pytest.raises(TypeError, match=r"datasets\[0\] should be a map-style dataset"):
        ds.make_mixed_batch_sampler([object()], [1], 0, 1, 0, 1)
    with pytest.raises(TypeError, match="datasets should be a list"):
        ds.make_mixed_batch_sampler(range(3), [1], 0, 1, 0, 1)


def test_counter_of_a_full_window_cycle_matches_the_counts() -> None:
    mix = mixture(LENGTHS, WEIGHTS, 9)
    component, _ = split(take(mix, 20 * 50), LENGTHS)
    assert Counter(component) == {0: 600, 1: 250, 2: 150}


def test_a_mixture_whose_records_overflow_int64_is_refused_naming_the_lengths() -> None:
    samplers = [ds.ReproducibleShuffleSampler(range(n), 0) for n in (2**62, 2**62, 1)]
    with pytest.raises(ValueError, match=r"^samplers should hold at most 2\*\*63 - 1 records"):
        ds.MixSampler(samplers, [1, 1, 1], seed=0)
