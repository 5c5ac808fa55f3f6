"""A mixture's nodes fetch the byte ranges of each set's shards they read in part.

NOTE [ mixture fetches ]: set ``k``'s partly read shards are ``node_fetches`` of set
``k``'s own order. The law (hypothesis): the planned ranges hold every sample a rank of
the mixture reads, in every epoch of every set. Then the real servers, counting what they
send: nginx (its access log's body bytes) and moto's S3 server (the counting proxy of
s3_server.py), a 2-set mixture with parts that cut shards, one rank a node with a cache
folder each, W = 1, 2 and 4: the first epoch of both sets serves at most 1.05x the sets'
bytes and exactly the planned ranges, every sample of each set once; their second epoch
serves nothing; a resume on another world size only the bytes its folders lack.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import webdataset as wds
from hypothesis import given, settings
from hypothesis import strategies as st
from nginx_server import Nginx
from s3_server import S3Server

from detsamplers.loader import WebDatasetMix
from detsamplers.loader._wds.mix._mixture_fetches import mixture_fetches
from detsamplers.loader._wds.mix._mixture_lanes import LaneOrder
from detsamplers.loader._wds.order._rank_batches import rank_positions
from detsamplers.loader._wds.order._shard_order import ShardOrder

BATCH = 8
PARTS = 12  # set 0: 12 shards, parts of ~40 samples; set 1: 9 shards, parts of ~27
SHARDS = (12, 9)
SHUFFLES = [{"shuffle_shards": False}, {"shuffle_block_shards": 2}, {"shuffle_window": 8}]
IDS = ["tar-order", "shard+block-shuffle", "shard+window-shuffle"]


@settings(max_examples=25, deadline=None)
@given(
    counts=st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=6), min_size=1, max_size=3),
    parts=st.lists(st.sampled_from([0, 2, 4, 6]), min_size=3, max_size=3),
    world=st.sampled_from([1, 2, 3, 4]),
    window=st.sampled_from([0, 3]),
    origin=st.integers(0, 30),
    seed=st.integers(0, 2**32),
)
def test_a_mixture_nodes_planned_ranges_hold_every_sample_its_rank_reads_in_every_set_epoch(
    counts: list[list[int]],
    parts: list[int],
    world: int,
    window: int,
    origin: int,
    seed: int,
) -> None:
    counts = [c for c in counts if sum(c)]
    parts = parts[: len(counts)]
    if not counts or not any(parts):
        return
    orders = [
        ShardOrder(c, seed + k, True, window, 0, p)
        for k, (c, p) in enumerate(zip(counts, parts, strict=True))
    ]
    lcm = math.lcm(*[p for p in parts if p])
    lanes = LaneOrder([(0, [sum(c) for c in counts])], None, seed, lcm, orders)
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in counts])[:-1]]).tolist()
    for rank in range(world):
        fetches = mixture_fetches(orders, offsets, world, [rank], origin)
        if fetches is None:
            # no set with parts the world size divides and at least a sample a part
            assert all(
                p == 0 or p % world or sum(c) < p for c, p in zip(counts, parts, strict=True)
            )
            continue
        horizon = origin + 2 * sum(sum(c) for c in counts)
        shards, samples = lanes.locate(np.arange(origin + rank, horizon, world, dtype=np.int64))
        for shard, sample in zip(shards.tolist(), samples.tolist(), strict=True):
            ranges = fetches.partial.get(shard)
            if ranges is not None:  # read in part: the sample lies in one of its ranges
                assert any(a <= sample < b for a, b in ranges), (rank, shard, sample, ranges)


def write_sets(root: Path) -> list[int]:
    """Two shard sets ``m0``, ``m1`` of 30-50 samples of 1-4 KB; labels distinct across sets."""
    rng = random.Random(1)
    sizes = []
    for k, shards in enumerate(SHARDS):
        (root / f"m{k}").mkdir(parents=True)
        label, start = k * 100_000, k * 100_000
        for shard in range(shards):
            with wds.TarWriter(str(root / f"m{k}" / f"d-{shard:02d}.tar")) as sink:
                for _ in range(rng.randint(30, 50)):
                    payload = rng.randbytes(rng.randint(1024, 4096))
                    sink.write({"__key__": f"k{label:06d}", "bin": payload, "cls": label})
                    label += 1
        sizes.append(label - start)
    return sizes


def label(sample: dict[str, Any]) -> int:
    return int(sample["cls"])


class Nodes:
    """A 2-set mixture behind a counting server, read by ``world`` nodes of one rank each."""

    def __init__(self, urls: list[str], data: int, sizes: list[int], served: Any, **options: Any):
        self.urls, self.data, self.sizes, self.served = urls, data, sizes, served
        self.options = options

    def make(self, folder: Path, world: int, rank: int, **options: Any) -> WebDatasetMix:
        defaults: dict[str, Any] = {"seed": 5, "batch_size": BATCH, "decode": (), "map": label}
        defaults.update(world_size=world, rank=rank, parts=PARTS, prefetch=2)
        defaults.update(cache_dir=str(folder / f"node-{rank}"), **self.options)
        return WebDatasetMix(self.urls, self.sizes, **{**defaults, **options})


def lanes_of(source: WebDatasetMix) -> LaneOrder:
    assert source._lanes is not None
    return source._lanes


def epoch_ends(source: WebDatasetMix, world: int, start: int = 0) -> tuple[int, int]:
    """Global batches from ``start`` until every lane has read one epoch of each set, and
    (from 0) until the first lane reaches epoch 2 of a set."""
    lanes, step = lanes_of(source), BATCH * world
    u = np.arange(PARTS)[:, None]
    sizes = np.asarray(source.mixture.lengths)[None, :]
    one, two = -(-(sizes - u) // PARTS), -(-(2 * sizes - u) // PARTS)  # lane u's per epoch
    batches, base = 1, lanes.lane_counts(start)
    while (lanes.lane_counts(start + batches * step) - base < one).any():
        batches += 1
    later = batches
    while (lanes.lane_counts((later + 1) * step) <= two).all():
        later += 1
    return batches, later


def held(source: WebDatasetMix, positions: Any) -> dict[int, list[tuple[int, int]]]:
    """The bytes of each shard read at ``positions`` that ``source``'s node fetches."""
    lanes = lanes_of(source)
    fetches = mixture_fetches(
        lanes.orders, lanes.offsets.tolist(), source.world_size, [source.rank]
    )
    out: dict[int, list[tuple[int, int]]] = {}
    for shard in set(lanes.locate(np.asarray(positions, dtype=np.int64))[0].tolist()):
        info = source.shards[shard]
        spans = None if fetches is None else fetches.byte_ranges(shard, info)
        out[shard] = list(spans or [(0, info.size)])
    return out


def read(stream: Iterator[Any], first: int, count: int, world: int, rank: int) -> dict[int, int]:
    """Label by global position of the rank's batches ``first`` to ``first + count``."""
    got: dict[int, int] = {}
    for batch, labels in enumerate(islice(stream, count), start=first):
        positions = rank_positions(batch, BATCH, world, rank, None)
        got.update(zip(positions.tolist(), [int(x) for x in labels], strict=True))
    return got


def two_epochs(nodes: Nodes, folder: Path, world: int, shuffle: dict[str, Any]) -> None:
    """Epoch 1 of both sets serves <= 1.05x their bytes, each sample once; epoch 2 nothing."""
    sources = [nodes.make(folder, world, rank, **shuffle) for rank in range(world)]
    first, second = epoch_ends(sources[0], world)
    streams = [iter(source) for source in sources]
    before = nodes.served()
    got: dict[int, int] = {}
    for rank, stream in enumerate(streams):
        got.update(read(stream, 0, first, world, rank))
    sent = nodes.served() - before
    positions = np.arange(first * BATCH * world, dtype=np.int64)
    sets, stream_at = lanes_of(sources[0]).stream(positions)
    for k, size in enumerate(nodes.sizes):  # each set's epoch 0: every sample once
        epoch0 = [got[p] for p in positions[(sets == k) & (stream_at < size)].tolist()]
        assert sorted(epoch0) == list(range(k * 100_000, k * 100_000 + size))
    # What mixture_fetches says each node fetches for the shards it reads by the end of
    # phase 1 (at least) and in any epoch (at most: the prefetch walks ahead, up to shards
    # that a set's later epoch reads, such as the tail samples of NOTE [ node fetches ]).
    least, most = 0, 0
    for rank, source in enumerate(sources):
        mine = np.arange(rank, first * BATCH * world, world, dtype=np.int64)
        least += sum(b - a for ranges in held(source, mine).values() for a, b in ranges)
        ever = np.arange(rank, 4 * second * BATCH * world, world, dtype=np.int64)
        most += sum(b - a for ranges in held(source, ever).values() for a, b in ranges)
    assert least <= sent <= most, (least, sent, most)
    # A window shuffle reads any sample of a window a part boundary cuts (NOTE [ node fetches ]).
    assert most <= (1.15 if shuffle.get("shuffle_window") else 1.05) * nodes.data, most / nodes.data
    before = nodes.served()
    later: dict[int, int] = {}
    for rank, stream in enumerate(streams):
        later.update(read(stream, first, second - first, world, rank))
    assert nodes.served() - before == 0  # the sets' second epoch downloads nothing
    positions = np.arange(first * BATCH * world, second * BATCH * world, dtype=np.int64)
    sets, stream_at = lanes_of(sources[0]).stream(positions)
    for k, size in enumerate(nodes.sizes):  # no sample of a set's epoch 1 twice
        epoch1 = [later[p] for p in positions[(sets == k) & (stream_at >= size)].tolist()]
        assert len(epoch1) == len(set(epoch1)) > 0
    for each in streams:
        each.close()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def over_nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    root = tmp_path_factory.mktemp("mix-fetches-root")
    sizes = write_sets(root)
    nginx = Nginx(root, tmp_path_factory.mktemp("mix-fetches-run"))
    try:
        data = sum(p.stat().st_size for p in root.glob("m*/*.tar"))
        urls = [f"{nginx.url}/m{k}/d-{{00..{n - 1:02d}}}.tar" for k, n in enumerate(SHARDS)]
        index = str(tmp_path_factory.mktemp("index"))
        WebDatasetMix(urls, sizes, seed=0, batch_size=1, index_dir=index)  # index once
        yield Nodes(urls, data, sizes, lambda: nginx.served(0)[0], index_dir=index)
    finally:
        nginx.close()


@pytest.mark.servers
@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("shuffle", SHUFFLES, ids=IDS)
def test_mixture_nodes_over_nginx_are_served_at_most_1_05x_the_sets_then_nothing(
    over_nginx: Nodes, tmp_path: Path, world: int, shuffle: dict[str, Any]
) -> None:
    two_epochs(over_nginx, tmp_path, world, shuffle)


@pytest.fixture(scope="module")
def over_s3(s3_session: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Nodes:
    folder = tmp_path_factory.mktemp("mix-egress")
    sizes = write_sets(folder)
    s3_session.create_bucket("mix-egress")
    for path in sorted(folder.glob("m*/*.tar")):
        s3_session.put("mix-egress", f"{path.parent.name}/{path.name}", path.read_bytes())
    urls = [f"s3://mix-egress/m{k}/d-{{00..{n - 1:02d}}}.tar" for k, n in enumerate(SHARDS)]
    index = str(tmp_path_factory.mktemp("index"))
    options = s3_session.options
    WebDatasetMix(urls, sizes, seed=0, batch_size=1, index_dir=index, storage_options=options)
    data = sum(p.stat().st_size for p in folder.glob("m*/*.tar"))

    def served() -> int:
        keys = [k for k in s3_session.served.bytes if k.startswith("m") and k.endswith(".tar")]
        return sum(s3_session.served.bytes[k] for k in keys)

    return Nodes(urls, data, sizes, served, index_dir=index, storage_options=options)


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("shuffle", SHUFFLES[:2], ids=IDS[:2])
def test_mixture_nodes_over_s3_are_served_at_most_1_05x_the_sets_then_nothing(
    over_s3: Nodes, tmp_path: Path, world: int, shuffle: dict[str, Any]
) -> None:
    two_epochs(over_s3, tmp_path, world, shuffle)


def covered(ranges: list[tuple[int, int]]) -> set[int]:
    return {x for a, b in ranges for x in range(a, b)}


@pytest.mark.servers
def test_a_mixture_resumed_on_another_world_size_is_served_only_the_bytes_its_folders_lack(
    over_nginx: Nodes, tmp_path: Path
) -> None:
    two_epochs(over_nginx, tmp_path, 4, SHUFFLES[1])  # four nodes fill node-0 .. node-3
    first = []
    for rank in range(2):
        source = over_nginx.make(tmp_path, 4, rank, **SHUFFLES[1])
        first.append(held(source, np.arange(rank, 4 * sum(over_nginx.sizes), 4)))
    position = 10 * BATCH * 4  # a multiple of both global batches: the grid's origin is 0
    before = over_nginx.served()
    expected = 0
    for rank in range(2):  # two nodes now, on the folders of nodes 0 and 1
        source = over_nginx.make(tmp_path, 2, rank, **SHUFFLES[1])
        source.load_state_dict({**source.state_dict(), "position": position})
        steps, _ = epoch_ends(source, 2, position)  # an epoch of every set in every lane
        labels = [x for batch in islice(iter(source), steps) for x in batch]
        assert len(labels) == steps * BATCH
        mine = np.arange(position + rank, position + 2 * BATCH * steps, 2)
        for shard, ranges in held(source, mine).items():
            expected += len(covered(ranges) - covered(first[rank].get(shard, [])))
    assert over_nginx.served() - before == expected > 0
