"""Rank-local parts: an epoch cut into C parts, exact on any world size, local on divisors of C."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wds_helpers import TOTAL, global_stream, make, noisy_label, shard_of, simulate

from detsamplers import ReproducibilityError
from detsamplers.loader import WebDataLoader
from detsamplers.loader._wds.order._local_parts import PartDeal
from detsamplers.loader._wds.order._rank_batches import rank_positions
from detsamplers.loader._wds.order._shard_order import ShardOrder

few_workers = pytest.mark.filterwarnings("ignore:This DataLoader will create")
shuffles = st.sampled_from([{}, {"shuffle_block_shards": 2}, {"shuffle_window": 3}])


@settings(max_examples=30, deadline=None)
@given(
    parts=st.sampled_from([2, 4, 6, 12, 7]),
    world=st.integers(1, 4),
    workers=st.integers(0, 2),
    batch=st.integers(1, 5),
    seed=st.integers(0, 2**32),
    shuffle=shuffles,
)
def test_every_epoch_reads_each_sample_once_on_any_world_size_and_workers(
    shards: str, parts: int, world: int, workers: int, batch: int, seed: int, shuffle: Any
) -> None:
    sources = [
        make(shards, seed=seed, batch_size=batch, world_size=world, rank=r, parts=parts, **shuffle)
        for r in range(world)
    ]
    steps = -(-2 * TOTAL // (batch * world))
    stream = global_stream(sources, workers, steps)
    for epoch in range(2):
        assert sorted(stream[epoch * TOTAL : (epoch + 1) * TOTAL]) == list(range(TOTAL))
    alone = make(shards, seed=seed, batch_size=1, parts=parts, **shuffle)
    assert stream == [b[0] for b in simulate(alone, 0, len(stream))]  # independent of W


@settings(max_examples=25, deadline=None)
@given(
    parts=st.sampled_from([2, 4, 6, 12, 16, 48, 720]),
    total=st.integers(1, 5000),
    block=st.sampled_from([0, 2, 3, 17]),
    epoch=st.integers(0, 3),
)
def test_the_deal_is_a_bijection_of_the_epoch(
    parts: int, total: int, block: int, epoch: int
) -> None:
    deal = PartDeal(parts, total, block, seed=epoch)
    assert sorted(deal.sequence(np.arange(total), epoch).tolist()) == list(range(total))


@settings(max_examples=20, deadline=None)
@given(
    world=st.sampled_from([1, 2, 4, 8, 16, 3, 6, 12, 24]),
    seed=st.integers(0, 2**32),
    block=st.sampled_from([0, 3]),
    batch=st.integers(1, 8),
    epoch=st.integers(0, 2),
)
def test_a_rank_of_a_world_size_dividing_parts_reads_only_its_share_of_shards(
    world: int, seed: int, block: int, batch: int, epoch: int
) -> None:
    counts = [int(c) for c in np.random.default_rng(seed).integers(40, 60, size=96)]
    order = ShardOrder(counts, seed, True, 0, block, parts=48)
    total = sum(counts)
    shards_read = []
    for rank in range(world):
        grid = batch * world
        steps = range(epoch * total // grid, (epoch + 1) * total // grid + 1)
        positions = np.concatenate([rank_positions(t, batch, world, rank, None) for t in steps])
        positions = positions[(positions >= epoch * total) & (positions < (epoch + 1) * total)]
        shards_read.append(set(order.locate(positions)[0].tolist()))
    runs = {1: 1, 2: 1, 4: 1, 8: 1, 16: 1, 3: 16, 6: 8, 12: 4, 24: 2}[world]  # 48 = 2^4 * 3
    for got in shards_read:
        # Its parts lie in `runs` contiguous runs of the sequence: each run can start and end
        # inside a shard, and the tail of the epoch (fewer than 48 samples) is shared.
        assert len(got) <= 96 / world + 2 * runs + 2
    assert set().union(*shards_read) == set(range(96))


@pytest.mark.parametrize("batch_size", [1, 4])
def test_resuming_at_every_position_gives_the_uninterrupted_batches(
    shards: str, batch_size: int
) -> None:
    options: dict[str, Any] = {
        "batch_size": batch_size,
        "map": noisy_label,
        "parts": 6,
        "shuffle_block_shards": 2,
    }
    steps = -(-2 * TOTAL // batch_size) + 2
    source = make(shards, **options)
    iterator = iter(source)
    reference, states = [], [json.loads(json.dumps(source.state_dict()))]
    for _ in range(steps):
        reference.append(np.asarray(next(iterator)).tolist())
        states.append(json.loads(json.dumps(source.state_dict())))
    for start in range(0, steps - 1, 3):
        resumed = make(shards, **options)
        resumed.load_state_dict(states[start])
        got = [np.asarray(b).tolist() for _, b in zip(range(2), resumed, strict=False)]
        assert got == reference[start : start + 2]


@settings(max_examples=15, deadline=None)
@given(
    before=st.integers(1, 4),
    after=st.integers(1, 4),
    workers=st.integers(0, 2),
    stop=st.integers(0, 12),
)
def test_a_resume_on_another_world_size_and_workers_continues_the_global_stream(
    shards: str, before: int, after: int, workers: int, stop: int
) -> None:
    options: dict[str, Any] = {"parts": 12, "shuffle_block_shards": 2, "batch_size": 3}
    first = [make(shards, world_size=before, rank=r, **options) for r in range(before)]
    head = global_stream(first, 0, stop)
    position = stop * 3 * before
    state = first[0].for_rank(world_size=before, rank=0, skip=stop).state_dict()
    assert state["position"] == position
    second = [make(shards, world_size=after, rank=r, **options) for r in range(after)]
    for source in second:
        source.load_state_dict(state)
    tail = global_stream(second, workers, 8)
    alone = [
        b[0]
        for b in simulate(make(shards, **{**options, "batch_size": 1}), 0, len(head) + len(tail))
    ]
    assert head + tail == alone


@pytest.mark.workers
@few_workers
def test_real_dataloader_workers_yield_what_the_simulation_predicts(shards: str) -> None:
    options: dict[str, Any] = {"world_size": 2, "rank": 1, "parts": 4, "shuffle_block_shards": 2}
    expected = simulate(make(shards, batch_size=3, **options), 2, 30)
    loader = WebDataLoader(make(shards, batch_size=3, **options), num_workers=2)
    got = [[int(x) for x in batch] for _, batch in zip(range(30), loader, strict=False)]
    assert got == expected


def test_a_state_from_another_part_count_is_refused_naming_the_field(shards: str) -> None:
    state = make(shards, parts=12).state_dict()
    assert state["config"]["parts"] == 12
    with pytest.raises(ReproducibilityError, match="parts is 12 in the state but 6 here"):
        make(shards, parts=6).load_state_dict(state)
    plain = make(shards).state_dict()  # saved without parts (or before they existed)
    assert "parts" not in plain["config"]
    make(shards, parts=0).load_state_dict(plain)
    with pytest.raises(ReproducibilityError, match="parts is None in the state but 12 here"):
        make(shards, parts=12).load_state_dict(plain)


def test_one_part_is_the_plain_order(shards: str) -> None:
    assert simulate(make(shards, parts=1), 0, 40) == simulate(make(shards), 0, 40)
    assert "parts" not in make(shards, parts=1).state_dict()["config"]


def test_with_parts_a_batch_draws_from_many_shards(shards: str) -> None:
    batches = simulate(make(shards, batch_size=8, parts=12), 0, 2 * TOTAL // 8)
    assert np.mean([len({shard_of(x)[0] for x in b}) for b in batches]) > 3.0


def test_bad_cache_and_part_arguments_are_refused_with_messages_that_name_them(
    shards: str,
) -> None:
    with pytest.raises(
        ValueError, match="parts should be a non-negative integer value, but got parts=-1"
    ):
        make(shards, parts=-1)
    with pytest.raises(TypeError, match="parts should be an integer"):
        make(shards, parts=True)
    with pytest.raises(
        TypeError,
        match=r"cache_dir should be a folder \(a str or an os.PathLike\), False .* got cache_dir=3",
    ):
        make(shards, cache_dir=3)
    with pytest.raises(
        ValueError, match="cache_limit should be a positive integer value, but got cache_limit=0"
    ):
        make(shards, cache_limit=0)
    with pytest.raises(
        ValueError, match="prefetch should be a positive integer value, but got prefetch=0"
    ):
        make(shards, prefetch=0)
