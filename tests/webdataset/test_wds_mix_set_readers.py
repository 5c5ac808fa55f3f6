"""MixReader (loader/_wds/mix/_set_readers.py): one reader per shard set of a mixture.

NOTE [ mixture readers ]. test_wds_mix.py and test_wds_mix_first_blocks.py read through it
inside a WebDatasetMix; these check the reader itself on local shards: any interleaving of
the sets' samples reads what one reader over all the shards reads, each set's reader is
asked only for its own shards (numbered within the set), and a set with a capacity above 1
gets a reader that keeps several of its shards open (ShardReaders).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.loader import ShardWriter
from detsamplers.loader._wds.index._index_shards import index_shards
from detsamplers.loader._wds.mix._set_readers import MixReader
from detsamplers.loader._wds.read._block_reader import ShardReaders
from detsamplers.loader._wds.read._shard_reader import ShardReader
from detsamplers.loader._wds.remote._remote_reads import RemoteOptions
from detsamplers.loader._wds.remote._urls import expand_urls

#: Two shard sets: set 0 of 3 shards (4, 2, 5 samples), set 1 of 2 shards (3, 6).
SETS = [[4, 2, 5], [3, 6]]


def write_sets(folder: Path) -> list[Any]:
    shards = []
    for k, counts in enumerate(SETS):
        for s, count in enumerate(counts):
            with ShardWriter(str(folder / f"set{k}-{s}-%d.tar"), maxcount=99, verbose=0) as w:
                for i in range(count):
                    w.write({"__key__": f"{k}-{s}-{i}", "bin": bytes([k, s, i]) * (50 + i)})
            shards += index_shards(expand_urls(str(folder / f"set{k}-{s}-0.tar")))
    return shards


def positions() -> list[tuple[int, int]]:
    flat = [count for counts in SETS for count in counts]
    return [(shard, i) for shard, count in enumerate(flat) for i in range(count)]


def mix_reader(shards: list[Any], capacities: list[int]) -> MixReader:
    return MixReader(shards, RemoteOptions(), [0, len(SETS[0])], capacities)


@settings(max_examples=25, deadline=None)
@given(
    order=st.permutations(positions()),
    capacities=st.tuples(st.integers(1, 3), st.integers(1, 2)),
    batch=st.integers(1, 7),
)
def test_any_interleaving_of_the_sets_reads_what_one_reader_over_all_shards_reads(
    tmp_path_factory: pytest.TempPathFactory,
    order: list[tuple[int, int]],
    capacities: tuple[int, int],
    batch: int,
) -> None:
    shards = write_sets(tmp_path_factory.mktemp("sets"))
    one, mixed = ShardReader(shards), mix_reader(shards, list(capacities))
    try:
        for at in range(0, len(order), batch):
            chunk = order[at : at + batch]
            wanted = [one.read(shard, index) for shard, index in chunk]
            shard_list, indexes = [s for s, _ in chunk], [i for _, i in chunk]
            assert mixed.read_many(shard_list, indexes) == wanted
            assert [mixed.read(s, i) for s, i in chunk] == wanted
    finally:
        one.close()
        mixed.close()


def test_each_sets_reader_is_asked_only_for_its_own_shards_numbered_within_the_set(
    tmp_path: Path,
) -> None:
    shards = write_sets(tmp_path)
    reader = mix_reader(shards, [1, 2])
    assert type(reader.parts[0]) is ShardReader and type(reader.parts[1]) is ShardReaders
    asked: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    for k, part in enumerate(reader.parts):
        real = part.read

        def spy(shard: int, index: int, k: int = k, real: Any = real) -> dict[str, Any]:
            asked[k].append((shard, index))
            return real(shard, index)  # type: ignore[no-any-return]

        part.read = spy  # type: ignore[method-assign]
    keys = [reader.read(s, i)["__key__"] for s, i in [(0, 0), (3, 0), (0, 1), (4, 5), (2, 4)]]
    reader.close()
    assert keys == ["0-0-0", "1-0-0", "0-0-1", "1-1-5", "0-2-4"]
    assert asked == {0: [(0, 0), (0, 1), (2, 4)], 1: [(0, 0), (1, 5)]}
