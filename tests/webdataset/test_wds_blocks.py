"""The cross-shard block shuffle: a bijection per epoch that mixes k shards, exactly resumable."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from http_server import ShardServer
from hypothesis import given, settings
from hypothesis import strategies as st
from wds_helpers import COUNTS, PATTERN, TOTAL, global_stream, make, noisy_label, shard_of, simulate

from detsamplers import ReproducibilityError
from detsamplers.loader import WebDataLoader
from detsamplers.loader._wds.index._index_shards import index_shards
from detsamplers.loader._wds.order._block_shuffle import BlockShuffle
from detsamplers.loader._wds.order._shard_order import ShardOrder
from detsamplers.loader._wds.read._block_reader import ShardReaders
from detsamplers.loader._wds.read._shard_reader import ShardReader
from detsamplers.loader._wds.remote._urls import expand_urls

few_workers = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def test_a_fixed_seed_gives_this_exact_order(shards: str) -> None:
    source = make(shards, seed=0, batch_size=6, shuffle_block_shards=3)
    assert simulate(source, 0, 3) == GOLDEN


# Epoch 0 reads shards 4, 3, 5 as its first block (ids 41-45, 30-40 and 46-61), mixed.
GOLDEN = [[58, 37, 53, 49, 45, 30], [36, 42, 60, 56, 50, 31], [51, 48, 39, 35, 38, 41]]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), blocks=st.integers(2, 8), epoch=st.integers(0, 4))
def test_each_block_of_k_shards_of_the_epochs_order_is_read_whole_before_the_next(
    shards: str, seed: int, blocks: int, epoch: int
) -> None:
    source = make(shards, seed=seed, batch_size=1, shuffle_block_shards=blocks)
    stream = [b[0] for b in simulate(source, 0, (epoch + 1) * TOTAL)][epoch * TOTAL :]
    order = source._order.shard_order(epoch).tolist()
    start = 0
    for first in range(0, len(COUNTS), blocks):
        members = order[first : first + blocks]
        size = sum(COUNTS[s] for s in members)
        assert {shard_of(x)[0] for x in stream[start : start + size]} == set(members)
        start += size


def test_a_block_mixes_its_shards_where_a_window_keeps_one(shards: str) -> None:
    def distinct_shards(**options: Any) -> float:
        batches = simulate(make(shards, batch_size=8, **options), 0, 4 * TOTAL // 8)
        return float(np.mean([len({shard_of(x)[0] for x in b}) for b in batches]))

    window, blocks = distinct_shards(shuffle_window=20), distinct_shards(shuffle_block_shards=4)
    assert window < 2.0 < 3.0 < blocks


def test_one_shard_per_block_is_no_block_shuffle(shards: str) -> None:
    plain = make(shards, batch_size=5)
    one = make(shards, batch_size=5, shuffle_block_shards=1)
    assert simulate(one, 0, 40) == simulate(plain, 0, 40)
    assert one.state_dict() == plain.state_dict()


def test_blocks_are_keyed_by_hashing_seed_epoch_and_block_not_adding_them() -> None:
    starts = np.array([0, 40, 80, 120], dtype=np.int64)
    offsets = np.arange(120, dtype=np.int64)

    def perm(seed: int, epoch: int) -> tuple[int, ...]:
        return tuple(BlockShuffle(seed, 2).permute(epoch, starts, offsets).tolist())

    assert len({perm(0, e) for e in range(3)}) == 3
    assert perm(0, 1) != perm(1, 0)
    out = BlockShuffle(5, 2).permute(0, starts, offsets)
    assert out[:80].tolist() != list(range(80))
    assert sorted(out[:80].tolist()) == list(range(80))  # the first block: shards 0 and 1
    assert sorted(out[80:].tolist()) == list(range(80, 120))  # the short last block
    block_starts = [out[i * 40 : i * 40 + 40] for i in range(2)]
    assert not (block_starts[0] < 40).all() and not (block_starts[0] >= 40).all()


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=12).filter(any),
    k=st.integers(2, 13),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**20),
)
def test_the_block_permutation_maps_each_block_onto_itself(
    counts: list[int], k: int, seed: int, epoch: int
) -> None:
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    offsets = np.arange(starts[-1], dtype=np.int64)
    blocks = BlockShuffle(seed, k)
    out = blocks.permute(epoch, starts, offsets)
    bounds = blocks.bounds(starts).tolist()
    for first, stop in pairwise(bounds):
        assert sorted(out[first:stop].tolist()) == list(range(first, stop))
    shuffled = np.random.default_rng(0).permutation(offsets)  # any order, any subset
    assert (blocks.permute(epoch, starts, shuffled[:7]) == out[shuffled[:7]]).all()


def test_empty_shards_inside_blocks_are_skipped() -> None:
    order = ShardOrder(
        [0, 3, 0, 0, 2, 0], seed=1, shuffle_shards=True, shuffle_window=0, shuffle_block_shards=2
    )
    for epoch in range(3):
        shards, samples = order.locate(np.arange(5, dtype=np.int64) + 5 * epoch)
        assert sorted(zip(shards.tolist(), samples.tolist(), strict=True)) == [
            (1, 0),
            (1, 1),
            (1, 2),
            (4, 0),
            (4, 1),
        ]


@pytest.mark.parametrize("batch_size", [1, 4])
def test_resuming_at_every_position_gives_the_uninterrupted_batches(
    shards: str, batch_size: int
) -> None:
    options: dict[str, Any] = {
        "batch_size": batch_size,
        "map": noisy_label,
        "shuffle_block_shards": 3,
    }
    steps = -(-2 * TOTAL // batch_size) + 2  # past two epoch boundaries and every block edge
    source = make(shards, **options)
    iterator = iter(source)
    reference, states = [], [json.loads(json.dumps(source.state_dict()))]
    for _ in range(steps):
        reference.append(np.asarray(next(iterator)).tolist())
        states.append(json.loads(json.dumps(source.state_dict())))
    for start in range(steps - 1):
        resumed = make(shards, **options)
        resumed.load_state_dict(states[start])
        got = [np.asarray(b).tolist() for _, b in zip(range(2), resumed, strict=False)]
        assert got == reference[start : start + 2]


@pytest.mark.workers
@few_workers
def test_real_dataloader_workers_yield_what_the_simulation_predicts(shards: str) -> None:
    for rank in range(2):
        options: dict[str, Any] = {"world_size": 2, "rank": rank, "shuffle_block_shards": 3}
        expected = simulate(make(shards, batch_size=3, **options), 2, 30)
        loader = WebDataLoader(make(shards, batch_size=3, **options), num_workers=2)
        got = [[int(x) for x in batch] for _, batch in zip(range(30), loader, strict=False)]
        assert got == expected


def test_a_state_from_another_block_size_is_refused_naming_the_field(shards: str) -> None:
    state = make(shards, shuffle_block_shards=3).state_dict()
    assert state["config"]["shuffle_block_shards"] == 3
    with pytest.raises(
        ReproducibilityError, match="shuffle_block_shards is 3 in the state but 4 here"
    ):
        make(shards, shuffle_block_shards=4).load_state_dict(state)
    with pytest.raises(
        ReproducibilityError, match="shuffle_block_shards is 3 in the state but None here"
    ):  # a key only the state has is named too
        make(shards).load_state_dict(state)
    plain = make(shards).state_dict()  # saved without the option (or before it existed)
    assert "shuffle_block_shards" not in plain["config"]
    with pytest.raises(
        ReproducibilityError, match="shuffle_block_shards is None in the state but 3 here"
    ):
        make(shards, shuffle_block_shards=3).load_state_dict(plain)


def test_bad_block_sizes_are_refused_with_messages_that_name_them(shards: str) -> None:
    with pytest.raises(TypeError, match="shuffle_block_shards should be an integer"):
        make(shards, shuffle_block_shards=2.0)
    with pytest.raises(TypeError, match="shuffle_block_shards should be an integer"):
        make(shards, shuffle_block_shards=True)
    with pytest.raises(
        ValueError,
        match="shuffle_block_shards should be a non-negative integer value, but got "
        "shuffle_block_shards=-1",
    ):
        make(shards, shuffle_block_shards=-1)
    with pytest.raises(
        ValueError,
        match=r"shuffle_window should be 0 with shuffle_block_shards > 1, but got "
        r"shuffle_window=4 and shuffle_block_shards=2: .* pass one of them",
    ):
        make(shards, shuffle_block_shards=2, shuffle_window=4)
    with pytest.raises(
        ValueError, match=("shards_per_block should be at least 2, but got shards_per_block=1")
    ):
        BlockShuffle(0, 1)


def test_the_readers_keep_at_most_capacity_shards_open_and_read_the_right_samples(
    shards: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    infos = index_shards(expand_urls(shards))
    opened: list[int] = []
    original = ShardReader.read

    def spy(self: ShardReader, shard: int, index: int) -> dict[str, Any]:
        opened.append(id(self))
        return original(self, shard, index)

    monkeypatch.setattr(ShardReader, "read", spy)
    readers = ShardReaders(infos, capacity=3)
    rng = np.random.default_rng(0)
    for _ in range(200):
        shard = int(rng.integers(0, 4))
        index = int(rng.integers(0, COUNTS[shard]))
        assert readers.read(shard, index)["__key__"] == f"s{shard}-{index:03d}"
        assert len(readers._open) <= 3
    assert len(set(opened)) == 3  # three readers made, then reused
    readers.close()
    assert not readers._open and len(readers._free) == 3
    with pytest.raises(
        ValueError, match="capacity should be a positive integer, but got capacity=0"
    ):
        ShardReaders(infos, capacity=0)


def test_a_worker_opens_at_most_twice_the_block_of_shards(shards: str) -> None:
    source = make(shards, batch_size=4, shuffle_block_shards=2)
    reader = source._reader()
    assert isinstance(reader, ShardReaders) and reader.capacity == 4
    assert isinstance(make(shards)._reader(), ShardReader)
    assert make(shards, shuffle_block_shards=50)._reader().capacity == len(COUNTS)  # type: ignore[union-attr]


def test_over_http_the_block_shuffle_reads_the_stream_of_the_local_run(
    server: ShardServer, shards: str, tmp_path: Path
) -> None:
    options: dict[str, Any] = {"batch_size": 5, "world_size": 2, "shuffle_block_shards": 3}
    steps = -(-TOTAL // 10) + 3
    urls = f"{server.url}/s/{PATTERN}"
    index_dir = str(tmp_path / "index-cache")
    over_http = [
        make(urls, rank=r, index_dir=index_dir, read_ahead=4096, **options) for r in range(2)
    ]
    local = [make(shards, rank=r, **options) for r in range(2)]
    assert global_stream(over_http, 0, steps) == global_stream(local, 0, steps)
