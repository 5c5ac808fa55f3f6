"""Reads of a window shuffle over local shards (NOTE [ kept windows ]): bytes read once.

A batch of a window-shuffled shard draws its samples from all over the window; each window of
a local shard is read once, in one read, and its samples are slices of it, so an epoch reads
each shard's bytes once, the same samples in the same order as sample-by-sample reads.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detsamplers._native import kernel
from detsamplers.loader import WebDatasetSource
from detsamplers.loader._wds.index._index_shards import index_shards
from detsamplers.loader._wds.index._shard_index_file import resolved
from detsamplers.loader._wds.read import _sample_span, _shard_reader
from detsamplers.loader._wds.read._shard_reader import PIECE_BYTES, ShardReader
from detsamplers.loader._wds.remote._urls import expand_urls

SHARDS, PER_SHARD, WINDOW = 3, 300, 300


def write_shards(folder: Path) -> str:
    """3 shards of 300 samples of 200 to 800 random bytes; their brace pattern."""
    rng = random.Random(0)
    with wds.ShardWriter(str(folder / "w-%06d.tar"), maxcount=PER_SHARD, verbose=0) as sink:
        for i in range(SHARDS * PER_SHARD):
            size = rng.randint(200, 800)
            sink.write({"__key__": f"{i:06d}", "bin": rng.randbytes(size), "cls": i})
    return str(folder / f"w-{{000000..{SHARDS - 1:06d}}}.tar")


@pytest.fixture(scope="module")
def pattern(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_shards(tmp_path_factory.mktemp("window-reads"))


class CountingReader(ShardReader):
    """A ``ShardReader`` counting the bytes and reads of its local spans."""

    bytes_read = 0
    reads = 0

    def _span(self, shard: int, start: int, end: int) -> bytes:
        CountingReader.bytes_read += end - start
        CountingReader.reads += 1
        return super()._span(shard, start, end)

    def _read_into(self, shard: int, start: int, end: int) -> memoryview:
        CountingReader.bytes_read += end - start
        CountingReader.reads += 1
        return super()._read_into(shard, start, end)


def epoch_keys(pattern: str, window: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One epoch's keys, batch by batch, read through :class:`CountingReader`."""
    from detsamplers.loader._wds import _webdataset_source

    monkeypatch.setattr(_webdataset_source, "ShardReader", CountingReader)
    source = WebDatasetSource(
        pattern, seed=3, batch_size=64, decode=(), collate_fn=list, repeat=False,
        shuffle_window=window,
    )  # fmt: skip
    CountingReader.bytes_read = CountingReader.reads = 0
    return [sample["__key__"] for batch in source for sample in batch]


def first_batch_reads(
    pattern: str, position: int, monkeypatch: pytest.MonkeyPatch, window: int = WINDOW
) -> int:
    """The bytes a fresh source's first batch at ``position`` reads (its reads counted too)."""
    from detsamplers.loader._wds import _webdataset_source

    monkeypatch.setattr(_webdataset_source, "ShardReader", CountingReader)
    source = WebDatasetSource(
        pattern, seed=3, batch_size=64, decode=(), collate_fn=list, shuffle_window=window
    )
    source.load_state_dict({**source.state_dict(), "position": position})
    CountingReader.bytes_read = CountingReader.reads = 0
    next(iter(source))
    return CountingReader.bytes_read


def test_a_window_shuffled_epoch_reads_each_shard_byte_about_once(
    pattern: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard_bytes = sum(Path(p).stat().st_size for p in expand_urls(pattern))
    first = first_batch_reads(pattern, 0, monkeypatch)  # its samples only, in runs
    first_reads = CountingReader.reads
    keys = epoch_keys(pattern, WINDOW, monkeypatch)
    assert sorted(keys) == [f"{i:06d}" for i in range(SHARDS * PER_SHARD)]
    assert keys != sorted(keys)  # shuffled
    # Each window read once (a window is a shard here), in pieces of at most PIECE_BYTES with
    # the kernel, in one read without it; before, about 300 / 64 reads of each. The first
    # batch reads its own samples first (NOTE [ kept windows ]).
    assert CountingReader.bytes_read <= shard_bytes + first
    if kernel is not None:
        pieces = shard_bytes // (PIECE_BYTES // 2) + SHARDS
        assert SHARDS < CountingReader.reads <= pieces + first_reads
        monkeypatch.setattr(_shard_reader, "kernel", None)
        monkeypatch.setattr(_sample_span, "kernel", None)
        assert epoch_keys(pattern, WINDOW, monkeypatch) == keys
        assert CountingReader.bytes_read <= shard_bytes + first
    assert CountingReader.reads == SHARDS + first_reads


@pytest.mark.parametrize("position", [0, 150, PER_SHARD - 32])
def test_a_first_batch_reads_its_samples_not_their_windows_and_the_next_keeps_the_window(
    pattern: str, position: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume's first batch (at ``PER_SHARD - 32``: across two shards) reads its samples.

    Runs join samples less than ``RUN_GAP`` apart (NOTE [ runs of samples ]); these shards
    are small enough for one run to cover a batch, so runs here are one sample each.
    """
    shard_bytes = min(Path(p).stat().st_size for p in expand_urls(pattern))
    monkeypatch.setattr(_shard_reader, "RUN_GAP", 0)
    first = first_batch_reads(pattern, position, monkeypatch)
    # 64 samples of 2 members (at most 800 bytes), each after a pax record and a header.
    assert 0 < first <= 64 * 4096 < shard_bytes
    # The same samples as a reader that keeps windows from the start gives.
    source = WebDatasetSource(
        pattern, seed=3, batch_size=64, decode=(), collate_fn=list, shuffle_window=WINDOW
    )
    source.load_state_dict({**source.state_dict(), "position": position})
    batches = iter(source)
    got = next(batches)
    keys = [sample["__key__"] for sample in got]
    shards, samples = zip(*source.locate(range(position, position + 64)), strict=True)
    windowed = ShardReader(source.shards, window=WINDOW)
    windowed.first_batch = False  # keeps windows for its first batch too
    kept = windowed.read_many(list(shards), list(samples))  # raw: the source decodes cls
    assert [(s["__key__"], s["bin"]) for s in kept] == [(s["__key__"], s["bin"]) for s in got]
    windowed.close()
    assert len(set(keys)) == 64
    CountingReader.bytes_read = 0
    next(batches)  # the second batch keeps its window: about a shard's bytes, once
    assert CountingReader.bytes_read >= shard_bytes // 2


def test_a_window_shuffled_epoch_reads_as_many_bytes_as_tar_order(
    pattern: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    epoch_keys(pattern, 0, monkeypatch)
    in_order = CountingReader.bytes_read
    first = first_batch_reads(pattern, 0, monkeypatch, 50)  # before windows are kept
    epoch_keys(pattern, 50, monkeypatch)
    assert CountingReader.bytes_read <= in_order + first + SHARDS * (PER_SHARD // 50) * 512


def samples_of(reader: ShardReader, reads: list[tuple[int, int]]) -> list[dict[str, Any]]:
    try:
        return reader.read_many([s for s, _ in reads], [i for _, i in reads])
    finally:
        reader.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    window=st.integers(0, 400),
    batches=st.lists(
        st.lists(st.tuples(st.integers(0, SHARDS - 1), st.integers(0, PER_SHARD - 1)), max_size=70),
        min_size=1,
        max_size=4,
    ),
)
def test_a_reader_with_a_window_gives_the_samples_sample_by_sample_reads_give(
    pattern: str, window: int, batches: list[list[tuple[int, int]]]
) -> None:
    shards = index_shards(expand_urls(pattern))
    windowed = ShardReader(shards, window=window)
    single = ShardReader(shards)
    for batch in batches:
        expected = [single.read(s, i) for s, i in batch]
        got = windowed.read_many([s for s, _ in batch], [i for _, i in batch])
        assert got == expected
    windowed.close()
    single.close()


def test_a_corrupt_header_inside_a_kept_window_is_refused_naming_the_shard(
    tmp_path: Path,
) -> None:
    first = expand_urls(write_shards(tmp_path))[0]
    shards = index_shards([first])
    stamp = os.stat(first)
    with open(first, "r+b") as handle:  # the magic of sample 150's first header
        packed = resolved(shards[0].members)
        handle.seek(packed.offsets[packed.starts[150]] - 512 + 257)
        handle.write(b"XXXXX")
    os.utime(first, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # past the stamp check
    reader = ShardReader(shards, window=WINDOW)
    reader.read_many([0], [3])  # a first batch reads its samples only (NOTE [ kept windows ])
    with pytest.raises(ValueError, match=r"w-000000\.tar' does not hold sample '000150'"):
        reader.read_many([0, 0], [3, 290])
    reader.close()


@pytest.mark.parametrize("window", [0, WINDOW])
def test_a_batch_asking_for_samples_past_a_shards_end_is_refused_naming_the_first_in_batch_order(
    pattern: str, window: int
) -> None:
    reader = ShardReader(index_shards(expand_urls(pattern)), window=window)
    with pytest.raises(IndexError, match=r"^sample 301 of 300 in shard '.*w-000000\.tar'$"):
        reader.read_many([0, 0, 0], [5, 301, 300])
    reader.close()
