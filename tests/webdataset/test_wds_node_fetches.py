"""Nodes fetch the byte ranges of the shards they read only in part (NOTE [ node fetches ]).

The law (hypothesis): the planned ranges hold every sample a node reads, in every epoch,
and no other node's part. Then the real servers, counting what they send: nginx (its
access log's body bytes) and moto's S3 server (the counting proxy of s3_server.py), one
rank a node with a cache folder each, W = 1, 2 and 4, with and without the shuffles: an
epoch serves at most 1.05x the shards' bytes, every sample once, and the next epoch
nothing; a resume on another world size only the bytes its folder lacks; a hostile range
file is fetched again or refused naming it.
"""

from __future__ import annotations

import os
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nginx_server import Nginx
from s3_server import S3Server
from wds_helpers import label, write_small_samples

from detsamplers.__main__ import main
from detsamplers.loader import WebDatasetSource
from detsamplers.loader._wds.order._rank_batches import rank_positions
from detsamplers.loader._wds.order._shard_order import ShardOrder
from detsamplers.loader._wds.read._node_fetches import node_fetches

BATCH = 8
PARTS = 20  # 682 samples: parts of 34, a tail of 2; about 1.25 parts a shard
SHUFFLES = [
    {"shuffle_shards": False},
    {"shuffle_shards": True, "shuffle_block_shards": 2},
    {"shuffle_shards": True, "shuffle_window": 16},
]
IDS = ["tar-order", "shard+block-shuffle", "shard+window-shuffle"]


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    parts=st.sampled_from([2, 4, 6, 12, 20]),
    world=st.sampled_from([1, 2, 3, 4]),
    shuffle=st.sampled_from(SHUFFLES),
    origin=st.integers(0, 50),
    seed=st.integers(0, 2**32),
)
def test_a_nodes_planned_ranges_hold_every_sample_it_reads_in_every_epoch_and_no_other_part(
    counts: list[int],
    parts: int,
    world: int,
    shuffle: dict[str, Any],
    origin: int,
    seed: int,
) -> None:
    window = shuffle.get("shuffle_window", 0)
    args = (counts, seed, shuffle["shuffle_shards"], window, shuffle.get("shuffle_block_shards", 0))
    order = ShardOrder(*args, parts=parts)
    total = sum(counts)
    if total == 0:
        return
    owners: dict[tuple[int, int], set[int]] = {}
    for rank in range(world):
        fetches = node_fetches(order, world, [rank], origin)
        if fetches is None:
            assert parts % world or total // parts == 0
            return
        positions = np.arange(origin + rank, origin + 3 * total, world, dtype=np.int64)
        shards, samples = order.locate(positions)
        for shard, sample in zip(shards.tolist(), samples.tolist(), strict=True):
            ranges = fetches.partial.get(shard)
            if ranges is not None:  # read in part: the sample lies in one of its ranges
                assert any(a <= sample < b for a, b in ranges), (rank, shard, sample, ranges)
        for shard, ranges in fetches.partial.items():
            assert list(ranges) == sorted(ranges) and len(ranges) > 0
            for a, b in ranges:
                assert 0 <= a < b <= counts[shard]
                for sample in range(a, b):
                    owners.setdefault((shard, sample), set()).add(rank)
    # Outside the tail (read by the ranks in turn) and a window's widening, a sample lies
    # in one node's ranges only.
    size = total // parts
    if not window and parts * size == total:
        assert all(len(ranks) == 1 for ranks in owners.values())


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    parts=st.sampled_from([2, 4, 6, 12, 20]),
    world=st.sampled_from([1, 2, 4]),
    blocks=st.booleans(),
    origin=st.integers(0, 50),
    seed=st.integers(0, 2**32),
)
def test_a_ranks_ranges_are_exactly_the_samples_it_reads_of_the_shards_it_does_not_read_whole(
    counts: list[int], parts: int, world: int, blocks: bool, origin: int, seed: int
) -> None:
    order = ShardOrder(counts, seed, True, 0, 2 if blocks else 0, parts=parts)
    total = sum(counts)
    if total == 0 or parts % world or total // parts == 0:
        return
    for rank in range(world):
        fetches = node_fetches(order, world, [rank], origin)
        assert fetches is not None
        # ``world`` epochs: the tail's samples reach every residue a rank reads in turn
        positions = np.arange(origin + rank, origin + (world + 1) * total, world, dtype=np.int64)
        shards, samples = order.locate(positions)
        read: dict[int, set[int]] = {}
        for shard, sample in zip(shards.tolist(), samples.tolist(), strict=True):
            read.setdefault(shard, set()).add(sample)
        expected = {}
        for shard, got in read.items():
            if len(got) < counts[shard]:  # read in part: its runs of samples
                runs: list[tuple[int, int]] = []
                for sample in sorted(got):
                    if runs and runs[-1][1] == sample:
                        runs[-1] = (runs[-1][0], sample + 1)
                    else:
                        runs.append((sample, sample + 1))
                expected[shard] = tuple(runs)
        assert fetches.partial == expected


def test_a_world_size_that_does_not_divide_the_parts_plans_whole_shards() -> None:
    order = ShardOrder([10, 10, 10], 0, True, 0, parts=4)
    assert node_fetches(order, 3, [0]) is None
    assert node_fetches(ShardOrder([10, 10, 10], 0, True, 0), 2, [0]) is None  # no parts


class Nodes:
    """A dataset behind a counting server, read by ``world`` nodes of one rank each."""

    def __init__(self, urls: str, data: int, total: int, served: Any, **options: Any) -> None:
        self.urls, self.data, self.total, self.served = urls, data, total, served
        self.options = options

    def make(self, folder: Path, world: int, rank: int, **options: Any) -> WebDatasetSource:
        defaults: dict[str, Any] = {"seed": 3, "batch_size": BATCH, "decode": (), "map": label}
        defaults.update(world_size=world, rank=rank, parts=PARTS, prefetch=2)
        defaults.update(cache_dir=str(folder / f"node-{rank}"), **self.options)
        return WebDatasetSource(self.urls, **{**defaults, **options})


def two_epochs(nodes: Nodes, folder: Path, world: int, shuffle: dict[str, Any]) -> None:
    """Epoch 1 serves <= 1.05x the data, every sample once; epoch 2 serves nothing."""
    first = -(-nodes.total // (BATCH * world))  # the global batches reaching past epoch 0
    second = nodes.total // (BATCH * world)  # within epoch 1
    sources = [nodes.make(folder, world, rank, **shuffle) for rank in range(world)]
    streams = [iter(source) for source in sources]
    before = nodes.served()
    got: dict[int, int] = {}
    for rank, stream in enumerate(streams):
        for batch, labels in enumerate(islice(stream, first)):
            positions = rank_positions(batch, BATCH, world, rank, None)
            got.update(zip(positions.tolist(), [int(x) for x in labels], strict=True))
    sent = nodes.served() - before
    epoch0 = [got[p] for p in range(nodes.total)]
    assert sorted(epoch0) == list(range(nodes.total))  # every sample once
    # What node_fetches says each node fetches for the shards it reads in both epochs (the
    # prefetch may fetch epoch 2's shards in epoch 1, never after).
    planned = 0
    for rank, source in enumerate(sources):
        positions = np.arange(rank, (first + second) * BATCH * world, world, dtype=np.int64)
        planned += sum(b - a for ranges in held(source, positions).values() for a, b in ranges)
    assert sent == planned
    # A window shuffle reads any sample of a window a part boundary cuts (NOTE [ node
    # fetches ]): 16-sample windows against 34-sample parts cost more.
    assert sent <= (1.15 if shuffle.get("shuffle_window") else 1.05) * nodes.data, sent / nodes.data
    before = nodes.served()
    later: dict[int, int] = {}
    for rank, stream in enumerate(streams):
        for batch, labels in enumerate(islice(stream, second), start=first):
            positions = rank_positions(batch, BATCH, world, rank, None)
            later.update(zip(positions.tolist(), [int(x) for x in labels], strict=True))
    epoch1 = [later[p] for p in later if p < 2 * nodes.total]
    end = min(2 * nodes.total, (first + second) * BATCH * world)
    assert len(epoch1) == len(set(epoch1)) == end - first * BATCH * world  # none twice
    assert nodes.served() - before == 0  # epoch 2 downloads nothing
    for stream in streams:
        stream.close()


@pytest.fixture(scope="module")
def over_nginx(nginx_small: tuple[Nginx, int], tmp_path_factory: pytest.TempPathFactory) -> Nodes:
    nginx, total = nginx_small  # 16 shards of 682 samples (conftest.py), read only
    data = sum(p.stat().st_size for p in (nginx.root / "s").glob("*.tar"))
    index = str(tmp_path_factory.mktemp("index"))
    urls = f"{nginx.url}/s/d-{{00..15}}.tar"
    WebDatasetSource(urls, seed=0, batch_size=1, index_dir=index, parts=0)  # index once
    return Nodes(urls, data, total, lambda: nginx.served(0)[0], index_dir=index)


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("shuffle", SHUFFLES, ids=IDS)
def test_nodes_over_nginx_are_served_at_most_1_05x_the_data_then_nothing(
    over_nginx: Nodes, tmp_path: Path, world: int, shuffle: dict[str, Any]
) -> None:
    two_epochs(over_nginx, tmp_path, world, shuffle)


@pytest.fixture(scope="module")
def over_s3(s3_session: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Nodes:
    """32 shards in a bucket, with their set index (``python -m detsamplers index``)."""
    folder = tmp_path_factory.mktemp("egress") / "s"
    total = write_small_samples(folder, 32)
    s3_session.create_bucket("egress")
    for path in sorted(folder.glob("*.tar")):
        s3_session.put("egress", f"s/{path.name}", path.read_bytes())
    urls = "s3://egress/s/d-{00..31}.tar"
    argv = ["index", urls, "--endpoint-url", s3_session.endpoint, "--storage-option"]
    assert main([*argv, "key=testing", "--storage-option", "secret=testing"]) == 0
    data = sum(p.stat().st_size for p in folder.glob("*.tar"))

    def served() -> int:
        keys = [k for k in s3_session.served.bytes if k.startswith("s/") and k.endswith(".tar")]
        return sum(s3_session.served.bytes[k] for k in keys)

    return Nodes(urls, data, total, served, storage_options=s3_session.options)


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("shuffle", SHUFFLES, ids=IDS)
def test_nodes_over_s3_are_served_at_most_1_05x_the_data_then_nothing(
    over_s3: Nodes, tmp_path: Path, world: int, shuffle: dict[str, Any]
) -> None:
    two_epochs(over_s3, tmp_path, world, shuffle)


def held(source: WebDatasetSource, positions: Any) -> dict[int, list[tuple[int, int]]]:
    """The bytes of each shard read at ``positions`` that ``source``'s node fetches."""
    fetches = node_fetches(source._order, source.world_size, [source.rank])
    out: dict[int, list[tuple[int, int]]] = {}
    for shard in set(source._order.locate(np.asarray(positions, dtype=np.int64))[0].tolist()):
        info = source.shards[shard]
        spans = None if fetches is None else fetches.byte_ranges(shard, info)
        out[shard] = list(spans or [(0, info.size)])
    return out


def epoch_of(source: WebDatasetSource) -> Any:
    """A rank's positions of a whole epoch (every shard it reads, but its tail samples')."""
    return np.arange(source.rank, source.num_samples, source.world_size, dtype=np.int64)


def covered(ranges: list[tuple[int, int]]) -> set[int]:
    return {x for a, b in ranges for x in range(a, b)}


@pytest.mark.parametrize("shuffle", SHUFFLES[:2], ids=IDS[:2])
def test_a_resume_on_another_world_size_is_served_only_the_bytes_its_folder_lacks(
    over_nginx: Nodes, tmp_path: Path, shuffle: dict[str, Any]
) -> None:
    two_epochs(over_nginx, tmp_path, 4, shuffle)  # four nodes fill node-0 .. node-3
    first = [nodes_held(over_nginx, tmp_path, 4, r, shuffle) for r in range(2)]
    position = 10 * BATCH * 4  # a multiple of both global batches: the grid's origin is 0
    before = over_nginx.served()
    expected = 0
    for rank in range(2):  # two nodes now, on the folders of nodes 0 and 1
        source = over_nginx.make(tmp_path, 2, rank, **shuffle)
        state = {**source.state_dict(), "position": position}
        source.load_state_dict(state)
        labels = [x for batch in islice(iter(source), over_nginx.total // 16 + 1) for x in batch]
        assert len(labels) == len(set(labels))
        for shard, ranges in held(source, epoch_of(source)).items():
            expected += len(covered(ranges) - covered(first[rank].get(shard, [])))
    assert over_nginx.served() - before == expected > 0


def nodes_held(
    nodes: Nodes, folder: Path, world: int, rank: int, shuffle: dict[str, Any]
) -> dict[int, list[tuple[int, int]]]:
    source = nodes.make(folder, world, rank, **shuffle)
    return held(source, epoch_of(source))


def test_a_truncated_range_file_is_fetched_again_and_a_lying_one_is_refused_naming_it(
    over_nginx: Nodes, tmp_path: Path
) -> None:
    two_epochs(over_nginx, tmp_path, 4, SHUFFLES[0])
    folder = tmp_path / "node-1"
    parts = sorted(folder.glob("*.part"), key=lambda p: -p.stat().st_size)
    assert parts  # node 1 reads some shards in part
    truncated, lying = parts[0], parts[1]
    size = truncated.stat().st_size
    os.truncate(truncated, size // 2)
    before = over_nginx.served()
    source = over_nginx.make(tmp_path, 4, 1, shuffle_shards=False)
    assert sum(len(b) for b in islice(iter(source), over_nginx.total // 32)) > 0
    assert truncated.stat().st_size == size
    assert over_nginx.served() - before == size  # that range again, nothing else
    lying.write_bytes(bytes(lying.stat().st_size))  # its size, but zeros
    source = over_nginx.make(tmp_path, 4, 1, shuffle_shards=False)
    with pytest.raises(
        ValueError, match=rf"cached copy '{lying}', which does not hold what the index"
    ):
        list(islice(iter(source), over_nginx.total // 32))
