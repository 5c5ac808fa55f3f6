"""WebDatasetMix with rank-local parts (NOTE [ mixture lanes ]) and its O(1) state."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import webdataset as wds
from hypothesis import given, settings
from hypothesis import strategies as st
from wds_helpers import global_stream, label, simulate

from detsamplers import MixSampler, ReproducibilityError
from detsamplers._seeds import derive
from detsamplers.loader import WebDataLoader, WebDatasetMix
from detsamplers.loader._wds.mix._mixture_lanes import LaneOrder
from detsamplers.loader._wds.order._rank_batches import rank_positions
from detsamplers.loader._wds.order._shard_order import ShardOrder

FIXTURE = Path(__file__).parent / "fixtures" / "mix_state_v2.json"
#: Three shard sets (samples per shard); set c's samples are labelled c * 1000 + i.
SETS = [[9, 7, 8, 6, 10, 8], [5, 7, 6, 6], [11, 9]]
SIZES = [sum(c) for c in SETS]
few_workers = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def write_set(folder: Path, component: int, counts: list[int]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    urls, value = [], component * 1000
    for shard, count in enumerate(counts):
        path = folder / f"c{component}-{shard:02d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for j in range(count):
                sink.write({"__key__": f"c{component}-{shard}-{j}", "cls": value})
                value += 1
        urls.append(str(path))
    return urls


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    root = tmp_path_factory.mktemp("mixparts")
    return [write_set(root / f"set{c}", c, counts) for c, counts in enumerate(SETS)]


def mix(urls: list[list[str]], weights: Any = (0.5, 0.3, 0.2), **kwargs: Any) -> WebDatasetMix:
    options: dict[str, Any] = {"seed": 0, "batch_size": 2, "decode": (), "map": label}
    options.update(kwargs)
    return WebDatasetMix(urls, list(weights), **options)


def set_of(value: int) -> int:
    return value // 1000


def shard_of(value: int) -> tuple[int, int]:
    k, i = divmod(value, 1000)
    for shard, count in enumerate(SETS[k]):
        if i < count:
            return k, shard
        i -= count
    raise ValueError(value)


shuffles = st.sampled_from([{}, {"shuffle_block_shards": 2}, {"shuffle_window": 3}])


@settings(max_examples=20, deadline=None)
@given(
    parts=st.sampled_from([4, 12, [4, 2, 0], 6]),
    world=st.integers(1, 4),
    workers=st.integers(0, 2),
    batch=st.integers(1, 4),
    seed=st.integers(0, 2**32),
    shuffle=shuffles,
)
def test_each_set_gives_every_sample_once_per_epoch_on_any_world_size_and_workers(
    sets: list[list[str]],
    parts: Any,
    world: int,
    workers: int,
    batch: int,
    seed: int,
    shuffle: dict[str, Any],
) -> None:
    options = {"seed": seed, "parts": parts, **shuffle}
    sources = [
        mix(sets, batch_size=batch, world_size=world, rank=r, **options) for r in range(world)
    ]
    steps = -(-3 * sum(SIZES) // (batch * world))
    stream = global_stream(sources, workers, steps)
    alone = mix(sets, batch_size=1, **options)
    assert stream == [b[0] for b in simulate(alone, 0, len(stream))]  # independent of W
    # Each set's reads, by their position t in the set's own stream (NOTE [ mixture lanes ]).
    lanes = alone._lanes
    assert lanes is not None
    sets_read, t = lanes.stream(np.arange(len(stream)))
    assert [set_of(x) for x in stream] == sets_read.tolist()
    for k, size in enumerate(SIZES):
        own = np.flatnonzero(sets_read == k)
        assert len(set(t[own].tolist())) == len(own)  # no position of the set read twice
        missing = np.setdiff1d(np.arange(t[own].max() + 1), t[own])
        done = (int(missing[0]) if len(missing) else int(t[own].max()) + 1) // size
        assert done >= 1
        for epoch in range(done):
            got = [stream[i] for i in own[(t[own] >= epoch * size) & (t[own] < (epoch + 1) * size)]]
            assert sorted(got) == [k * 1000 + i for i in range(size)]


@settings(max_examples=15, deadline=None)
@given(
    world=st.sampled_from([1, 2, 4, 8, 3, 6, 12]),
    seed=st.integers(0, 2**32),
    block=st.sampled_from([0, 3]),
    batch=st.integers(1, 8),
)
def test_a_rank_of_a_world_size_dividing_parts_reads_only_its_share_of_each_sets_shards(
    world: int, seed: int, block: int, batch: int
) -> None:
    # Sets of 96, 48 and 64 shards of 40-60 samples, 48 parts: the order alone (no files).
    rng = np.random.default_rng(seed)
    counts = [[int(c) for c in rng.integers(40, 60, size=n)] for n in (96, 48, 64)]
    seeds = [derive(seed, "mix-component", k) for k in range(3)]
    orders = [
        ShardOrder(c, s, True, 0, block, parts=48) for c, s in zip(counts, seeds, strict=True)
    ]
    lanes = LaneOrder([(0, [0.5, 0.2, 0.3])], None, seed, 48, orders)
    total = int(1.5 * sum(sum(c) for c in counts))
    runs = {1: 1, 2: 1, 4: 1, 8: 1, 3: 16, 6: 8, 12: 4}[world]  # 48 = 2^4 * 3
    for k, set_counts in enumerate(counts):
        size = sum(set_counts)
        union: set[int] = set()
        for rank in range(world):
            steps = range(total // (batch * world) + 1)
            positions = np.concatenate([rank_positions(t, batch, world, rank, None) for t in steps])
            sets_read, t = lanes.stream(positions)
            mine = t[(sets_read == k) & (t < size)]  # the set's first epoch
            shards = set(orders[k].locate(mine)[0].tolist())
            union |= shards
            # Its parts lie in `runs` runs of the epoch, each may start and end inside a
            # shard, and the epoch's tail (fewer than 48 samples) is shared.
            assert len(shards) <= len(set_counts) / world + 2 * runs + 2
        assert union == set(range(len(set_counts)))


def test_each_lane_gives_each_set_its_count_in_every_window(sets: list[list[str]]) -> None:
    source = mix(sets, (0.6, 0.25, 0.15), parts=4)
    lanes = source._lanes
    assert lanes is not None
    window, counts = lanes.laws[0].window, lanes.laws[0].counts
    assert (window, counts) == (20, [12, 5, 3])
    k, _ = lanes.stream(np.arange(4 * 10 * window))
    for u in range(4):
        lane = k[u::4]
        for j in range(10):
            got = np.bincount(lane[j * window : (j + 1) * window], minlength=3).tolist()
            assert got == counts
    assert source.progress(4 * 10 * window)["consumed"] == [4 * 10 * c for c in counts]


@pytest.mark.parametrize("parts", [4, [4, 2, 0]])
def test_resuming_at_every_position_on_another_world_size_gives_the_uninterrupted_stream(
    sets: list[list[str]], parts: Any
) -> None:
    options: dict[str, Any] = {"parts": parts, "shuffle_block_shards": 2}
    reference = [b[0] for b in simulate(mix(sets, batch_size=1, **options), 0, 150)]
    for position in range(0, 120, 7):
        saved = json.loads(json.dumps({**mix(sets, **options).state_dict(), "position": position}))
        world = 1 + position % 4
        ranks = [mix(sets, batch_size=3, world_size=world, rank=r, **options) for r in range(world)]
        for source in ranks:
            source.load_state_dict(saved)
        assert global_stream(ranks, position % 3, 2) == reference[position:][: 6 * world]


def test_a_curriculum_with_parts_switches_without_losing_or_repeating_a_sample(
    sets: list[list[str]],
) -> None:
    curriculum = [(37, [0.2, 0.2, 0.6]), (90, [0.0, 0.5, 0.5])]
    source = mix(sets, parts=4, curriculum=curriculum)
    stream = [
        b[0] for b in simulate(mix(sets, batch_size=1, parts=4, curriculum=curriculum), 0, 200)
    ]
    lanes = source._lanes
    assert lanes is not None
    k, t = lanes.stream(np.arange(200))
    for c in range(3):
        own = t[k == c]
        assert len(set(own.tolist())) == len(own)
    assert [set_of(x) for x in stream[90:]].count(0) == 0  # weight 0 from position 90 on
    # progress() counts what the stream read.
    for position in (0, 36, 37, 38, 90, 133, 200):
        got = source.progress(position)["consumed"]
        assert got == [int((k[:position] == c).sum()) for c in range(3)]


@pytest.mark.workers
@few_workers
def test_a_loader_with_workers_resumes_a_mixture_with_parts_exactly(
    sets: list[list[str]],
) -> None:
    options: dict[str, Any] = {"parts": 6, "world_size": 2, "rank": 1, "batch_size": 3}
    loader = WebDataLoader(mix(sets, **options), num_workers=2)
    iterator = iter(loader)
    head = [[int(x) for x in next(iterator)] for _ in range(5)]
    state = loader.state_dict()
    del iterator
    resumed = WebDataLoader(mix(sets, **options), num_workers=2)
    resumed.load_state_dict(state)
    tail = [[int(x) for x in b] for _, b in zip(range(4), resumed, strict=False)]
    assert head + tail == simulate(mix(sets, **options), 0, 9)


def test_parts_are_in_the_state_and_another_part_count_is_refused_naming_it(
    sets: list[list[str]],
) -> None:
    state = mix(sets, parts=4).state_dict()
    assert state["config"]["parts"] == 4
    assert mix(sets, parts=[4, 2, 0]).state_dict()["config"]["parts"] == [4, 2, 0]
    assert "parts" not in mix(sets).state_dict()["config"]
    with pytest.raises(ReproducibilityError, match=r"parts is 4 in the state but 8 here"):
        mix(sets, parts=8).load_state_dict(state)
    with pytest.raises(ReproducibilityError, match=r"parts is 4 in the state but 0 here"):
        mix(sets).load_state_dict(state)
    with pytest.raises(ValueError, match=r"parts should be one part count for every shard set"):
        mix(sets, parts=[4, 2])
    with pytest.raises(ValueError, match=r"parts\[1\] should be"):
        mix(sets, parts=[4, -1, 0])


def test_a_state_saved_in_the_per_shard_format_still_loads(
    tmp_path: Path,
) -> None:
    # Saved by main at a7dd143 (version 2, a list of counts per set) over these shard names.
    old_sets = [[5, 3, 4], [2, 3], [7]]
    urls = [write_set(tmp_path / f"set{c}", c, counts) for c, counts in enumerate(old_sets)]
    saved = json.loads(FIXTURE.read_text())
    assert saved["version"] == 2 and saved["counts"] == old_sets

    def build() -> WebDatasetMix:
        return mix(urls, seed=0, shuffle_window=3, collate_fn=list, map=None)

    resumed = build()
    resumed.load_state_dict(saved)
    assert resumed.position == 14
    assert resumed.state_dict()["counts"][0]["shards"] == 3  # saved again in version 3
    # Version 1 had the same shape: it loads too.
    build().load_state_dict({**saved, "version": 1})
    with pytest.raises(ReproducibilityError, match=r"c1-01.tar' had 3 samples .* has 4 now"):
        write_set(tmp_path / "set1", 1, [2, 4])
        build().load_state_dict(saved)


def test_the_state_of_two_sets_of_half_a_million_shards_is_at_most_one_kilobyte() -> None:
    counts = [[10_000 + (i * 7919) % 5_000 for i in range(500_000)] for _ in range(2)]
    source = WebDatasetMix.__new__(WebDatasetMix)
    source._mix_counts = counts
    source._mix_summaries = None
    source._lanes = None
    source.mixture = MixSampler([range(sum(c)) for c in counts], [0.7, 0.3], 0)
    source._fingerprint = "0" * 16
    source._config = {
        "seed": 0,
        "weights": [0.7, 0.3],
        "window": 10,
        "curriculum": [],
        "shuffle_shards": True,
        "shuffle_window": 0,
        "shards": ["0123456789abcdef", "fedcba9876543210"],
        "parts": 720,
    }
    source.position = 123_456_789_012
    state = source.state_dict()
    size = len(json.dumps(state))
    assert size <= 1024, size
    assert [c["shards"] for c in state["counts"]] == [500_000, 500_000]


def test_a_set_added_at_a_resume_with_parts_gives_the_run_that_had_it_from_there(
    sets: list[list[str]],
) -> None:
    options: dict[str, Any] = {"parts": 4, "batch_size": 1}
    before = [b[0] for b in simulate(mix(sets[:2], (0.6, 0.4), **options), 0, 80)]
    for entry in (1, 13, 40):
        grown = mix(sets, (0.6, 0.4), curriculum=[(entry, [0.3, 0.2, 0.5])], **options)
        straight = [b[0] for b in simulate(grown, 0, entry + 20)]
        assert straight[:entry] == before[:entry]  # the past is the saved run's
        saved = mix(sets[:2], (0.6, 0.4), **options).state_dict()
        resumed = mix(
            sets, (0.6, 0.4), curriculum=[(entry, [0.3, 0.2, 0.5])], **{**options, "batch_size": 2}
        )
        resumed.load_state_dict(json.loads(json.dumps({**saved, "position": entry})))
        assert [x for b in simulate(resumed, 0, 10) for x in b] == straight[entry:][:20]
        assert grown.progress(entry)["consumed"][2] == 0
        assert grown._lanes is not None
        k, t = grown._lanes.stream(np.arange(entry, entry + 40))
        assert 0 in t[k == 2].tolist()  # the new set starts at its own stream's position 0


def test_an_unpickled_mixture_with_parts_gives_the_same_batches(sets: list[list[str]]) -> None:
    source = mix(sets, parts=[4, 2, 0], shuffle_block_shards=2, skip=5)
    copy = pickle.loads(pickle.dumps(source))
    assert simulate(copy, 2, 12) == simulate(source, 2, 12)
