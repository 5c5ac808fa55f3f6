"""Locality over S3 (moto's server on 127.0.0.1): each shard's bytes leave the bucket once a node.

16 shards of 2-8 KB samples in a bucket of the ``s3_session`` server (s3_server.py: moto
behind a proxy that counts, per key, each ``GetObject`` and the body bytes it sent). The
ranks of one node are built in this process and share one cache folder; one test reads
through real DataLoader worker processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server
from wds_helpers import label, simulate, write_small_samples

from detsamplers.__main__ import main
from detsamplers.loader import WebDataLoader, WebDatasetSource
from detsamplers.loader._wds.read._cache_reader import CachedReader
from detsamplers.loader._wds.read._node_fetches import node_fetches

SHARDS = 16
PARTS = 48


@dataclass
class Bucket:
    s3: S3Server
    urls: str
    bytes: int
    total: int

    def make(self, cache: Path, **options: Any) -> WebDatasetSource:
        defaults: dict[str, Any] = {"seed": 0, "batch_size": 8, "decode": (), "map": label}
        defaults.update(cache_dir=str(cache), parts=PARTS, storage_options=self.s3.options)
        return WebDatasetSource(self.urls, **{**defaults, **options})

    def shard_traffic(self) -> tuple[int, int]:
        """Body bytes and ``GetObject`` requests of the shards (not their index files)."""
        keys = [k for k in self.s3.served.ranges if k.endswith(".tar")]
        sent = sum(self.s3.served.bytes[k] for k in keys)
        return sent, sum(len(self.s3.served.ranges[k]) for k in keys)


@pytest.fixture(scope="module")
def bucket(s3_session: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bucket]:
    """The shards on S3 with their set index (``python -m detsamplers index``)."""
    folder = tmp_path_factory.mktemp("locality") / "s"
    total = write_small_samples(folder, SHARDS)
    s3_session.create_bucket("locality")
    for path in sorted(folder.glob("*.tar")):
        s3_session.put("locality", f"s/{path.name}", path.read_bytes())
    urls = f"s3://locality/s/d-{{00..{SHARDS - 1:02d}}}.tar"
    argv = ["index", urls, "--endpoint-url", s3_session.endpoint, "--storage-option"]
    assert main([*argv, "key=testing", "--storage-option", "secret=testing"]) == 0
    data = sum(p.stat().st_size for p in folder.glob("*.tar"))
    yield Bucket(s3_session, urls, data, total)


def one_epoch(bucket: Bucket, cache: Path, world: int, **options: Any) -> list[int]:
    """Every rank's samples of one epoch; the ranks of one node share ``cache``."""
    labels: list[int] = []
    for rank in range(world):
        source = bucket.make(cache, world_size=world, rank=rank, repeat=False, **options)
        labels.extend(int(x) for batch in source for x in batch)
    return labels


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize(
    "shuffle",
    [{}, {"shuffle_block_shards": 2}, {"shuffle_window": 64}],
    ids=["tar", "block-shuffle", "window-shuffle"],
)
def test_an_epoch_over_s3_serves_each_shard_once_and_a_warm_cache_serves_nothing(
    bucket: Bucket, tmp_path: Path, world: int, shuffle: dict[str, Any]
) -> None:
    bucket.s3.reset()
    labels = one_epoch(bucket, tmp_path / "cache", world, **shuffle)
    sent, gets = bucket.shard_traffic()
    assert sorted(labels) == list(range(bucket.total))
    assert 0.99 * bucket.bytes <= sent <= 1.05 * bucket.bytes, (sent / bucket.bytes, gets)
    # Each shard whole, in one ranged GetObject (under read_ahead), plus each rank's first
    # batch by ranges of its own samples (NOTE [ shard prefetch ]).
    assert SHARDS <= gets <= SHARDS + 8 * world
    # Epoch 2 through the warm cache, from new sources (as after a restart): no shard bytes.
    bucket.s3.reset()
    again = one_epoch(bucket, tmp_path / "cache", world, **shuffle)
    assert sorted(again) == list(range(bucket.total))
    assert bucket.shard_traffic() == (0, 0)


def test_without_parts_every_rank_reads_nearly_every_shard_the_cost_parts_remove(
    bucket: Bucket, tmp_path: Path
) -> None:
    bucket.s3.reset()
    labels = one_epoch(bucket, tmp_path / "unused", 4, parts=0, cache_dir=None)
    assert sorted(labels) == list(range(bucket.total))
    sent, _ = bucket.shard_traffic()
    assert sent > 3 * bucket.bytes  # positions dealt in turn: each rank ranges over all shards


@pytest.mark.parametrize("world", [1, 4])
def test_a_resume_mid_epoch_over_s3_downloads_exactly_the_shards_still_to_read(
    bucket: Bucket, tmp_path: Path, world: int
) -> None:
    options: dict[str, Any] = {"repeat": False, "parts": 4, "shuffle_block_shards": 2}
    whole = [bucket.make(tmp_path / "a", world_size=world, rank=r, **options) for r in range(world)]
    steps = len(whole[0])
    expected = [[int(x) for x in s.batch_at(t)] for s in whole for t in range(steps // 2, steps)]
    state = {**whole[0].state_dict(), "position": (steps // 2) * 8 * world}
    still = {shard for shard, _ in whole[0].locate(range(state["position"], bucket.total))}
    bucket.s3.reset()
    got = []
    for rank in range(world):
        resumed = bucket.make(tmp_path / "b", world_size=world, rank=rank, **options)
        resumed.load_state_dict(state)
        got.extend([int(x) for x in batch] for batch in resumed)
    assert got == expected
    sent, gets = bucket.shard_traffic()
    # Each shard still to read, once: whole, or a rank's byte range of it when the rank
    # reads it in part (NOTE [ node fetches ]); and each rank's first batch by its samples'
    # ranges (NOTE [ shard prefetch ]): never a shard the resumed epoch is done with.
    fetched: set[tuple[int, int, int]] = set()  # the ranks' equal ranges: one file of the folder
    for s in whole:
        fetches = node_fetches(s._order, world, [s.rank])
        mine = {shard for t in range(steps // 2, steps) for shard, _ in s.locate(s._positions(t))}
        for shard in mine:
            spans = None if fetches is None else fetches.byte_ranges(shard, s.shards[shard])
            fetched.update((shard, *span) for span in spans or [(0, s.shards[shard].size)])
    # The ranks' ranges of a shard may overlap (ranges less than RANGE_GAP apart merged):
    # the node fetches their union, each byte once (a range copies what an earlier one wrote).
    exact, shard_end = 0, (-1, 0)
    for shard, start, stop in sorted(fetched):
        if shard == shard_end[0]:
            start = max(start, shard_end[1])
        exact += max(0, stop - start)
        shard_end = (shard, max(stop, shard_end[1]) if shard == shard_end[0] else stop)
    first = [(shard, index) for s in whole for shard, index in s.locate(s._positions(steps // 2))]
    ranged = sum(
        m[-1][1] + m[-1][2] - m[0][1]
        for shard, index in first
        for m in [whole[0].shards[shard].members[index]]
    )
    assert len(still) < SHARDS
    assert len(still) <= gets <= len(still) + len(first)
    assert exact <= sent <= exact + ranged


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_dataloader_worker_processes_of_two_ranks_share_one_node_cache_over_s3(
    bucket: Bucket, tmp_path: Path
) -> None:
    # No retry, a short timeout: a request of the main process after rank 0's workers ended
    # would stall on a pooled connection the workers unregistered (NOTE [ fsspec loop after
    # fork ]), and fail here instead of waiting out the timeout.
    options: dict[str, Any] = {"world_size": 2, "repeat": False, "shuffle_block_shards": 2}
    options.update(timeout=10.0, retries=0)
    bucket.s3.reset()
    got = []
    for rank in range(2):
        loader = WebDataLoader(bucket.make(tmp_path / "node", rank=rank, **options), num_workers=2)
        got.append([[int(x) for x in batch] for batch in loader])
    sent, gets = bucket.shard_traffic()
    assert 0.99 * bucket.bytes <= sent <= 1.05 * bucket.bytes, (sent / bucket.bytes, gets)
    assert sorted(x for rank in got for batch in rank for x in batch) == list(range(bucket.total))
    expected = [
        simulate(bucket.make(tmp_path / "node", rank=r, **options), 2, 10**6) for r in (0, 1)
    ]
    assert got == expected


def test_a_first_batch_over_more_shards_than_prefetch_reads_its_samples_not_whole_shards(
    bucket: Bucket, tmp_path: Path
) -> None:
    # Shards larger than read_ahead (one download request): the samples are read by ranges.
    source = bucket.make(tmp_path / "cold", shuffle_block_shards=2, prefetch=2, read_ahead=1 << 14)
    located = source.locate(source._positions(5))
    assert len({shard for shard, _ in located}) > 2  # parts: more shards than prefetch
    assert all(source.shards[shard].size > 1 << 14 for shard, _ in located)
    starts = [0]
    for info in source.shards:
        starts.append(starts[-1] + len(info))
    wanted = sum(
        m[-1][1] + m[-1][2] - m[0][1]
        for shard, index in located
        for m in [source.shards[shard].members[index]]
    )
    bucket.s3.reset()
    batch = [int(x) for x in source.batch_at(5)]  # a reader of its own: no prefetch thread
    assert batch == [starts[shard] + index for shard, index in located]
    # One ranged GET per sample; a shard's first also reads the 512-byte tar header before
    # it, checked against the index (NOTE [ set index ]).
    headers = 512 * len({shard for shard, _ in located})
    assert bucket.shard_traffic() == (wanted + headers, len(located))
    assert not list((tmp_path / "cold").glob("*.tar"))  # no shard downloaded whole


def test_a_first_batch_within_prefetch_shards_waits_for_them_whole(
    bucket: Bucket, tmp_path: Path
) -> None:
    source = bucket.make(tmp_path / "cold", shuffle_block_shards=2, prefetch=SHARDS)
    located = source.locate(source._positions(5))
    needed = {shard for shard, _ in located}
    bucket.s3.reset()
    source.batch_at(5)
    assert bucket.shard_traffic() == (sum(source.shards[s].size for s in needed), len(needed))


def test_a_first_batch_over_more_shards_than_prefetch_downloads_those_within_read_ahead_whole(
    bucket: Bucket, tmp_path: Path
) -> None:
    # A shard no larger than one download request costs one GET whole or by a range: whole,
    # it is downloaded once for the batches after this one too (NOTE [ shard prefetch ]).
    source = bucket.make(tmp_path / "cold", shuffle_block_shards=2, prefetch=2)
    located = source.locate(source._positions(5))
    needed = {shard for shard, _ in located}
    assert len(needed) > 2
    assert all(source.shards[shard].size <= source.remote.read_ahead for shard in needed)
    starts = [0]
    for info in source.shards:
        starts.append(starts[-1] + len(info))
    bucket.s3.reset()
    batch = [int(x) for x in source.batch_at(5)]  # a reader of its own: no prefetch thread
    assert batch == [starts[shard] + index for shard, index in located]
    whole = sum(source.shards[shard].size for shard in needed)
    assert bucket.shard_traffic() == (whole, len(needed))  # each shard once, one GET each
    assert len(list((tmp_path / "cold").glob("*.tar"))) == len(needed)


def test_reading_counts_its_waits_on_downloads_after_the_first_batch(
    bucket: Bucket, tmp_path: Path
) -> None:
    options: dict[str, Any] = {"parts": 0, "shuffle_shards": False, "repeat": False}
    source = bucket.make(tmp_path / "c", **options)
    assert source.cache is not None
    # Without the prefetch thread each shard after the first batch's is waited for: exactly.
    reader = CachedReader(source.shards, source.cache, source.prefetch)
    first: set[int] = set()
    labels = []
    for t in range(len(source)):
        shards, samples = source._order.locate(source._positions(t))
        first = first or set(shards.tolist())
        labels += [int(s["cls"]) for s in reader.read_many(shards.tolist(), samples.tolist())]
    reader.close()
    assert labels == list(range(bucket.total))
    stats = source.cache.stats
    assert (stats.downloaded, stats.waits) == (SHARDS, SHARDS - len(first))
    assert stats.waited > 0.0
    # An epoch through the warm cache, as a user reads it (prefetch thread on): no wait.
    bucket.s3.reset()
    again = bucket.make(tmp_path / "c", **options)
    assert [int(x) for batch in again for x in batch] == list(range(bucket.total))
    assert again.cache is not None
    assert (again.cache.stats.downloaded, again.cache.stats.waits) == (0, 0)
    assert again.cache.stats.waited == 0.0
    assert bucket.shard_traffic() == (0, 0)
