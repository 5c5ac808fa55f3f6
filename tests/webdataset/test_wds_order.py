"""Order and split: keyed shard order, windowed shuffle, exactly once across ranks and workers."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st
from wds_helpers import COUNTS, TOTAL, global_stream, make, shard_of, simulate

import detsamplers.loader
from detsamplers.loader import WebDataLoader, check_reproducible


def epochs_of(stream: list[int]) -> list[list[int]]:
    return [stream[i : i + TOTAL] for i in range(0, len(stream) - TOTAL + 1, TOTAL)]


def test_the_source_and_its_loader_are_exported_in_the_sorted_all() -> None:
    names = detsamplers.loader.__all__
    assert names == sorted(names)
    assert {"WebDataLoader", "WebDatasetSource"} <= set(names)


def test_a_fixed_seed_gives_this_exact_order(shards: str) -> None:
    source = make(shards, seed=0, batch_size=6, shuffle_window=4)
    assert simulate(source, 0, 2) == GOLDEN


# Shard 4 (ids 41-45) first, its window of 4 permuted, then shard 3 (ids 30-40).
GOLDEN = [[44, 42, 41, 43, 45, 32], [30, 33, 31, 34, 37, 35]]


@settings(max_examples=40)
@given(
    world_size=st.integers(1, 4),
    num_workers=st.integers(0, 3),
    batch_size=st.integers(1, 5),
    seed=st.integers(0, 2**32),
    window=st.sampled_from([0, 1, 4, 32]),
    shuffle_shards=st.booleans(),
    blocks=st.sampled_from([0, 2, 3, 7, 50]),  # shuffle_block_shards; then no window
)
def test_every_epoch_reads_each_sample_exactly_once_for_any_ranks_and_workers(
    shards: str,
    world_size: int,
    num_workers: int,
    batch_size: int,
    seed: int,
    window: int,
    shuffle_shards: bool,
    blocks: int,
) -> None:
    options = {
        "seed": seed,
        "shuffle_window": 0 if blocks else window,
        "shuffle_shards": shuffle_shards,
        "shuffle_block_shards": blocks,
    }
    ranks = [
        make(shards, batch_size=batch_size, world_size=world_size, rank=r, **options)
        for r in range(world_size)
    ]
    steps = -(-3 * TOTAL // (batch_size * world_size))
    stream = global_stream(ranks, num_workers, steps)
    assert len(stream) == steps * batch_size * world_size  # every rank, every batch, full
    for epoch in epochs_of(stream):
        assert sorted(epoch) == list(range(TOTAL))
    # The global stream is the same whatever the split.
    single = make(shards, batch_size=1, **options)
    assert stream == [b[0] for b in simulate(single, 0, len(stream))]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(("world_size", "num_workers"), [(1, 2), (2, 3)])
def test_real_dataloader_workers_yield_what_the_simulation_predicts(
    shards: str, world_size: int, num_workers: int
) -> None:
    for rank in range(world_size):
        source = make(shards, batch_size=3, world_size=world_size, rank=rank, shuffle_window=4)
        expected = simulate(source, num_workers, 30)
        loader = WebDataLoader(source, num_workers=num_workers)
        got = []
        for batch in loader:
            assert not batch.is_shared()  # small batches come back by value
            got.append([int(x) for x in batch])
            if len(got) == 30:
                break
        assert got == expected


@settings(max_examples=30)
@given(seed=st.integers(0, 2**32), window=st.integers(0, 25), epoch=st.integers(0, 5))
def test_each_epoch_reads_shards_whole_and_windows_in_order(
    shards: str, seed: int, window: int, epoch: int
) -> None:
    source = make(shards, seed=seed, batch_size=1, shuffle_window=window)
    stream = [b[0] for b in simulate(source, 0, (epoch + 1) * TOTAL)][epoch * TOTAL :]
    located = [shard_of(x) for x in stream]
    order = [s for i, (s, _) in enumerate(located) if i == 0 or located[i - 1][0] != s]
    assert sorted(order) == list(range(len(COUNTS)))  # each shard is one contiguous run
    width = window if window > 1 else 1
    for previous, current in pairwise(located):
        if previous[0] == current[0]:
            assert previous[1] // width <= current[1] // width
    if window <= 1:  # no window shuffle: each shard in tar order
        pairs = pairwise(located)
        assert all(b[1] == a[1] + 1 for a, b in pairs if a[0] == b[0])


def test_shard_order_changes_with_the_epoch_and_is_keyed_by_hashing_not_adding(
    shards: str,
) -> None:
    orders = {
        (seed, epoch): tuple(make(shards, seed=seed)._order.shard_order(epoch).tolist())
        for seed in (0, 1)
        for epoch in (0, 1, 2)
    }
    assert len({orders[(0, e)] for e in (0, 1, 2)}) == 3
    assert orders[(0, 1)] != orders[(1, 0)]


def test_shuffle_shards_false_reads_shards_in_url_order(shards: str) -> None:
    source = make(shards, batch_size=TOTAL, shuffle_shards=False, repeat=False)
    assert simulate(source, 0, 2) == [list(range(TOTAL))]


def test_the_source_passes_check_reproducible_and_is_an_iterable_dataset(shards: str) -> None:
    source = make(shards)
    assert isinstance(source, tud.IterableDataset)
    check_reproducible(source)
    loader = WebDataLoader(source)
    assert isinstance(loader, tud.DataLoader) and loader.batch_size is None


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 12), min_size=1, max_size=6).filter(any),
    seed=st.integers(0, 2**31),
    window=st.integers(2, 7),
    block=st.sampled_from([0, 2]),
    parts=st.sampled_from([0, 3]),
    data=st.data(),
)
def test_locating_many_positions_at_once_gives_each_position_its_own_window_sample(
    counts: list[int], seed: int, window: int, block: int, parts: int, data: st.DataObject
) -> None:
    """The window permutations applied run by run equal them applied one position at a time."""
    import numpy as np

    from detsamplers.loader._wds.order._shard_order import ShardOrder

    order = ShardOrder(counts, seed, True, window, block, parts)
    total = sum(counts)
    positions = data.draw(st.lists(st.integers(0, 4 * total - 1), max_size=40))
    at = np.asarray(positions, dtype=np.int64)
    shards, samples = order.locate(at)
    plain = ShardOrder(counts, seed, True, 0, block, parts)
    alone = ShardOrder(counts, seed, True, window, block, parts)
    for position, shard, sample in zip(positions, shards.tolist(), samples.tolist(), strict=True):
        raw_shards, raw = plain.locate(np.asarray([position], dtype=np.int64))
        epoch, within = position // total, int(raw[0])
        expected = alone._window(epoch, int(raw_shards[0]), within // window)[within % window]
        assert (shard, sample) == (int(raw_shards[0]), int(expected))
