"""The steady-state read path through a warm node cache (NOTE [ cached reads ], NOTE [ batches
located together ], NOTE [ shard prefetch ]): the same batches and bytes, fewer calls.

Shards of 2-8 KB samples in a bucket of the ``s3_session`` server (moto behind the counting
proxy of s3_server.py), indexed as a user does (``python -m detsamplers index``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from s3_server import S3Server
from wds_helpers import write_small_samples

from detsamplers.__main__ import main
from detsamplers.loader import WebDatasetSource
from detsamplers.loader._wds.order._located_batches import CHUNK_POSITIONS, located_batches
from detsamplers.loader._wds.order._rank_batches import BatchShape, rank_positions
from detsamplers.loader._wds.order._shard_order import ShardOrder
from detsamplers.loader._wds.read._cache_reader import CachedReader

SHARDS = 8
SHUFFLES: list[dict[str, Any]] = [
    {},
    {"shuffle_window": 5},
    {"shuffle_block_shards": 2},
    {"parts": 6},
    {"parts": 4, "shuffle_block_shards": 3},
    {"parts": 3, "part_shards": "epoch"},
]


@dataclass
class Bucket:
    s3: S3Server
    urls: str
    total: int

    def make(self, cache: Path | None, **options: Any) -> WebDatasetSource:
        defaults: dict[str, Any] = {"seed": 0, "batch_size": 8, "collate_fn": list}
        defaults.update(storage_options=self.s3.options, repeat=False)
        if cache is not None:
            defaults["cache_dir"] = str(cache)
        return WebDatasetSource(self.urls, **{**defaults, **options})

    def shard_traffic(self) -> tuple[int, int]:
        """Body bytes and ``GetObject`` requests of the shards (not their index files)."""
        keys = [k for k in self.s3.served.ranges if k.endswith(".tar")]
        return sum(self.s3.served.bytes[k] for k in keys), sum(
            len(self.s3.served.ranges[k]) for k in keys
        )


@pytest.fixture(scope="module")
def bucket(s3_session: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bucket]:
    folder = tmp_path_factory.mktemp("cached-reads") / "s"
    total = write_small_samples(folder, SHARDS)
    s3_session.create_bucket("cached-reads")
    for path in sorted(folder.glob("*.tar")):
        s3_session.put("cached-reads", f"s/{path.name}", path.read_bytes())
    urls = f"s3://cached-reads/s/d-{{00..{SHARDS - 1:02d}}}.tar"
    argv = ["index", urls, "--endpoint-url", s3_session.endpoint, "--storage-option"]
    assert main([*argv, "key=testing", "--storage-option", "secret=testing"]) == 0
    yield Bucket(s3_session, urls, total)


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=9).filter(lambda c: sum(c) > 0),
    seed=st.integers(0, 2**32),
    shuffle=st.sampled_from(SHUFFLES),
    shuffle_shards=st.booleans(),
    batch_size=st.sampled_from([1, 3, 64, 700, 1500]),
    world=st.integers(1, 4),
    rank_seed=st.integers(0, 3),
    start=st.integers(0, 30),
    step=st.integers(1, 3),
    origin=st.integers(0, 50),
    repeat=st.booleans(),
)
def test_batches_located_a_chunk_at_a_time_are_those_located_one_by_one(
    counts: list[int],
    seed: int,
    shuffle: dict[str, Any],
    shuffle_shards: bool,
    batch_size: int,
    world: int,
    rank_seed: int,
    start: int,
    step: int,
    origin: int,
    repeat: bool,
) -> None:
    rank = rank_seed % world
    shape = BatchShape(batch_size, world, rank, None if repeat else 3 * sum(counts), origin)
    end = start + 40 * step if repeat else max(start, -(-(3 * sum(counts)) // (batch_size * world)))
    order = ShardOrder(counts, seed, shuffle_shards, shuffle.get("shuffle_window", 0), **{
        k: v for k, v in shuffle.items() if k != "shuffle_window"
    })  # fmt: skip
    alone = ShardOrder(*order._args)
    got = list(located_batches(order, shape, start, step, end))
    assert len(got) == len(range(start, end, step))
    for t, (shards, indexes) in zip(range(start, end, step), got, strict=True):
        want_shards, want_indexes = alone.locate(rank_positions(t, *shape))
        assert shards.tolist() == want_shards.tolist()
        assert indexes.tolist() == want_indexes.tolist()


def test_the_first_batch_locates_its_own_positions_and_each_next_call_twice_as_many() -> None:
    # A reader that stops after a batch or two (a first batch, a resume) locates about what
    # it reads; a long read still locates CHUNK_POSITIONS at a time.
    order = ShardOrder([40] * 50, 3, True, 5)
    sizes: list[int] = []
    real = order.locate

    def counting(positions: Any) -> Any:
        sizes.append(len(positions))
        return real(positions)

    order.locate = counting  # type: ignore[method-assign]
    shape = BatchShape(4, 2, 1, None, 0)
    batches = located_batches(order, shape, 0, 1, None)
    next(batches)
    assert sizes == [4]
    for _ in range(3000 // 4):
        next(batches)
    assert sizes[:9] == [4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert set(sizes[9:]) == {CHUNK_POSITIONS}


def test_a_warm_cache_reads_each_sample_in_one_pread_and_gives_the_range_reads_bytes(
    bucket: Bucket, tmp_path: Path
) -> None:
    options: dict[str, Any] = {"parts": 12, "shuffle_block_shards": 2, "world_size": 2}
    plain = [list(bucket.make(None, rank=r, **options)) for r in (0, 1)]
    for r in (0, 1):  # epoch 1 fills the cache
        assert list(bucket.make(tmp_path, rank=r, **options)) == plain[r]
    bucket.s3.reset()
    calls: list[int] = []
    real = os.pread

    def counted(fd: int, size: int, offset: int) -> bytes:
        calls.append(size)
        return real(fd, size, offset)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "pread", counted)
        sources = [bucket.make(tmp_path, rank=r, **options) for r in (0, 1)]
        warm = [list(source) for source in sources]
    assert warm == plain  # byte for byte, in the same order
    samples = [s for rank in warm for batch in rank for s in batch]
    assert len(samples) == bucket.total and len(calls) == bucket.total
    # Each read is the sample's own span: from its first member to the end of its last; the
    # first read of each shard a reader pins also holds the tar header before it (checked:
    # NOTE [ set index ]): 512 bytes more, at most once per pin (a shard may be pinned again).
    shards = bucket.make(None).shards
    spans = [
        max(o + n for _, o, n in members) - min(o for _, o, n in members)
        for info in shards
        for members in info.members
    ]
    headers, rest = divmod(sum(calls) - sum(spans), 512)
    pins = sum(source.cache.stats.hits for source in sources if source.cache is not None)
    assert rest == 0 and len(shards) <= headers <= pins, (headers, len(shards), pins)
    assert Counter(calls) - Counter(spans + [span + 512 for span in spans]) == Counter()
    assert bucket.shard_traffic() == (0, 0)


def test_the_one_pread_path_and_the_sample_by_sample_path_give_the_same_samples(
    bucket: Bucket, tmp_path: Path
) -> None:
    source = bucket.make(tmp_path)
    assert source.cache is not None
    reader = CachedReader(source.shards, source.cache, source.prefetch)
    try:
        for shard, info in enumerate(source.shards):
            fd = reader._fd(shard)
            assert reader._view(shard).packed is not None  # an index file's members, in order
            for index in range(len(info.keys)):
                fast = reader._read(shard, index, fd)
                assert fast == reader._sample(shard, index)
                assert set(fast) == {"__key__", "__url__", "bin", "cls"}
            with pytest.raises(IndexError, match=f"sample {len(info.keys)} of"):
                reader._read(shard, len(info.keys), fd)
    finally:
        reader.close()
    assert reader.views == {} and reader.pins == {}


def test_while_the_first_batch_downloads_the_prefetch_starts_a_later_batchs_shard(
    bucket: Bucket, tmp_path: Path
) -> None:
    source = bucket.make(tmp_path, shuffle_shards=False, parts=0)
    bucket.s3.reset()
    cache = source.cache
    assert cache is not None
    reader = CachedReader(source.shards, cache, source.prefetch)
    first = [0, 1, 2, 3, 4]  # more shards than the prefetch downloads at once
    try:
        with contextlib.ExitStack() as held:
            # The first batch's downloads in flight: each holds its shard's lock.
            for shard in first:
                lock = held.enter_context(
                    open(cache.path(source.shards[shard])[: -len(".tar")] + ".lock", "a+b")
                )
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            reader.follow(iter([first, [5], [5, 6]]))
            deadline = time.monotonic() + 60
            while 5 not in reader.pins and time.monotonic() < deadline:
                time.sleep(0.01)
            with reader.lock:  # shard 5 came while the first batch's shards were still locked
                assert 5 in reader.pins and not set(first) & set(reader.pins)
                assert reader.done == -1
    except BaseException:
        reader.close()
        raise
    try:
        got = [
            reader.read_many(first, [0] * 5),
            reader.read_many([5], [1]),
            reader.read_many([5, 6], [2, 0]),
        ]
    finally:
        reader.close()
    assert [[s["__key__"] for s in batch] for batch in got] == [
        [source.shards[s].keys[i] for s, i in zip(shards, indexes, strict=True)]
        for shards, indexes in ((first, [0] * 5), ([5], [1]), ([5, 6], [2, 0]))
    ]
    assert (cache.stats.downloaded, cache.stats.waits) == (7, 0)  # each shard once, no wait
    assert bucket.shard_traffic()[1] == 7


def test_a_warm_cache_reads_a_batchs_run_of_next_samples_in_one_pread_with_the_same_bytes(
    bucket: Bucket, tmp_path: Path
) -> None:
    plain = list(bucket.make(None, shuffle_shards=False))
    assert list(bucket.make(tmp_path, shuffle_shards=False)) == plain  # fills the cache
    calls: list[int] = []
    real = os.pread

    def counted(fd: int, size: int, offset: int) -> bytes:
        calls.append(size)
        return real(fd, size, offset)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "pread", counted)
        warm = list(bucket.make(tmp_path, shuffle_shards=False))
    assert warm == plain  # byte for byte, in the same order
    # Tar order: a batch of 8 reads one run per shard it touches, after that shard's first
    # sample since it was pinned, read alone with its tar header (checked); at most two
    # reads per shard a batch touches, never one read per sample.
    runs = sum(len({s["__url__"] for s in batch}) for batch in plain)
    assert runs <= len(calls) <= 2 * runs < bucket.total / 2


def test_a_download_into_the_cache_cut_short_resumes_at_its_first_missing_byte(
    bucket: Bucket, tmp_path: Path
) -> None:
    # Written chunk by chunk as it arrives (NOTE [ shard cache ]): a retry continues the file
    # where the dropped answer stopped, and the copy is the shard byte for byte.
    source = bucket.make(tmp_path, shuffle_shards=False)
    assert source.cache is not None
    info, key = source.shards[0], "s/d-00.tar"
    bucket.s3.reset()
    bucket.s3.drop[key] = 1  # the answer sends half of its body, then closes
    fd = source.cache.pin(info)
    try:
        copy = os.pread(fd, info.size + 1, 0)
    finally:
        source.cache.unpin(fd)
    stored = bucket.s3.client().get_object(Bucket="cached-reads", Key=key)["Body"].read()
    assert copy == stored and len(copy) == info.size
    first, resumed = bucket.s3.served.ranges[key]
    start, stop = (int(x) for x in first.removeprefix("bytes=").split("-"))
    again, stop_again = (int(x) for x in resumed.removeprefix("bytes=").split("-"))
    assert start == 0 and 0 < again <= (stop + 1) // 2 and stop_again == stop == info.size - 1
    assert source.cache.stats.bytes == info.size  # the bytes written, each once
