"""One way to read a sample (NOTE [ one way to read a sample ], NOTE [ sample readers ]).

Every reader cuts a sample out of a span with ``cut_sample`` and verifies the span with
``verify_span``; the readers share the ``SampleReader`` protocol.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import webdataset as wds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detsamplers.loader._wds.index._index_shards import index_shards, scan_shard
from detsamplers.loader._wds.read._block_reader import ShardReaders
from detsamplers.loader._wds.read._sample_reader import SampleReader
from detsamplers.loader._wds.read._sample_span import Members, cut_sample, verify_span
from detsamplers.loader._wds.read._shard_reader import ShardReader
from detsamplers.loader._wds.remote._urls import expand_urls
from detsamplers.loader._wds.shard._shard_info import ShardInfo
from detsamplers.loader._wds.shard._tar_check import HeaderTable
from detsamplers.loader._wds.shard._tar_walk import BLOCK

SIZES = st.lists(st.integers(0, 2000), min_size=1, max_size=12)


def write_shard(folder: Path, sizes: Sequence[int]) -> str:
    """A shard of ``len(sizes)`` samples, sample ``i`` with a ``bin`` member of ``sizes[i]``."""
    path = str(folder / "shard.tar")
    with wds.TarWriter(path) as sink:
        for i, size in enumerate(sizes):
            sink.write({"__key__": f"k{i:03d}", "bin": bytes([i % 251]) * size, "cls": str(i)})
    return path


def tar_members(path: str) -> dict[str, bytes]:
    """Each member's bytes as tarfile reads them, by name."""
    with tarfile.open(path) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive if m.isfile()}  # type: ignore[union-attr]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=SIZES, data=st.data())
def test_a_sample_cut_from_any_span_holding_it_is_what_tarfile_reads(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], data: st.DataObject
) -> None:
    path = write_shard(tmp_path_factory.mktemp("span"), sizes)
    keys, packed = scan_shard(path)
    want = tar_members(path)
    raw = Path(path).read_bytes()
    first = data.draw(st.integers(0, len(keys) - 1))
    stop = data.draw(st.integers(first + 1, len(keys)))
    rows = range(packed.starts[first], packed.starts[stop])
    base = data.draw(st.integers(0, packed.offsets[rows.start]))  # any start before it
    end = packed.offsets[rows.stop - 1] + packed.sizes[rows.stop - 1]
    span = raw[base:end]
    for index in range(first, stop):
        sample = cut_sample(
            {}, span, base, packed.suffixes, packed.offsets, packed.sizes,
            range(packed.starts[index], packed.starts[index + 1]),
        )  # fmt: skip
        assert sample == {s: want[f"{keys[index]}.{s}"] for s in ("bin", "cls")}


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=SIZES, data=st.data())
def test_a_span_verified_by_its_members_or_by_the_shard_table_names_the_same_member(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], data: st.DataObject
) -> None:
    path = write_shard(tmp_path_factory.mktemp("flip"), sizes)
    keys, packed = scan_shard(path)
    info = index_shards(expand_urls(path))[0]
    raw = bytearray(Path(path).read_bytes())
    member = data.draw(st.integers(0, len(packed.offsets) - 1))
    if data.draw(st.booleans()):  # a byte of that member's header flipped, or nothing
        raw[packed.offsets[member] - BLOCK + data.draw(st.integers(0, 155))] ^= 0x5A
    base, end = 0, packed.offsets[-1] + packed.sizes[-1]
    span = bytes(raw[base:end])
    owner = [
        k
        for k, (a, b) in enumerate(zip(packed.starts[:-1], packed.starts[1:], strict=True))
        for _ in range(a, b)
    ]
    rows = Members(
        [keys[k] for k in owner], packed.suffixes, packed.offsets, packed.sizes
    )  # fmt: skip
    table = HeaderTable(keys, packed)
    outcomes = []
    for check in (
        lambda: verify_span(info, span, base, rows),
        lambda: verify_span(info, span, base, table, range(len(owner))),
        lambda: verify_span(info, span, base, table, table.members_of(range(len(keys)))),
    ):
        try:
            check()
            outcomes.append(None)
        except ValueError as error:
            outcomes.append(str(error))
    assert outcomes[0] == outcomes[1] == outcomes[2]
    if outcomes[0] is not None:
        assert f"shard {info.path!r} does not hold sample" in outcomes[0]


def test_a_sample_cut_sets_each_member_from_the_span_and_keeps_what_the_sample_held() -> None:
    sample = cut_sample({"__key__": "k"}, b"xxabcde", 10, ["a", "b"], [12, 14], [2, 3], range(2))
    assert sample == {"__key__": "k", "a": b"ab", "b": b"cde"}


def plan_of(seen: list[int]) -> Iterator[Sequence[int]]:
    for batch in range(3):
        seen.append(batch)
        yield [0]


@pytest.mark.parametrize("capacity", [0, 2])
def test_readers_that_do_not_prefetch_take_the_plan_without_walking_it(
    tmp_path: Path, capacity: int
) -> None:
    path = write_shard(tmp_path, [10, 20, 30])
    shards: list[ShardInfo] = index_shards(expand_urls(path))
    reader: SampleReader = ShardReaders(shards, capacity) if capacity else ShardReader(shards)
    seen: list[int] = []
    reader.follow(plan_of(seen))
    got = reader.read_many([0, 0], [2, 1])
    reader.close()
    assert seen == []  # nothing of the plan computed
    assert [s["__key__"] for s in got] == ["k002", "k001"]
    assert got[0]["bin"] == bytes([2]) * 30


def test_every_reader_the_source_builds_is_a_sample_reader(tmp_path: Path) -> None:
    from detsamplers.loader import WebDatasetSource

    path = write_shard(tmp_path, [5, 6, 7, 8])
    for extra in ({}, {"shuffle_block_shards": 2, "shuffle_window": 0}):
        source = WebDatasetSource(path, seed=0, batch_size=2, collate_fn=list, **extra)
        reader = source._reader()
        names = {"read", "read_many", "follow", "close"}
        assert all(callable(getattr(reader, name)) for name in names), type(reader)
        assert len(source.batch_at(0, reader)) == 2
        reader.close()
