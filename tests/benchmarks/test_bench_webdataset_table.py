"""benchmarks/webdataset_table.py: plain webdataset's exact resume and ours' first pass."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

wds = pytest.importorskip("webdataset")
import webdataset_table as table  # noqa: E402

SHARDS, PER_SHARD = 3, 100
TOTAL = SHARDS * PER_SHARD


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> str:
    return table.write(str(tmp_path_factory.mktemp("shards")), SHARDS, PER_SHARD)


def labels(batches: object, count: int) -> list[list[int]]:
    return [batch[1].tolist() for batch in itertools.islice(batches, count)]  # type: ignore[call-overload]


@settings(max_examples=12, deadline=None)
@given(epoch=st.integers(0, 2), batch=st.integers(0, TOTAL // table.BATCH))
def test_webdataset_started_at_the_shard_and_offset_yields_what_its_replay_yields(
    urls: str, epoch: int, batch: int
) -> None:
    position = epoch * TOTAL + batch * table.BATCH
    replay = iter(table.plain(urls).repeat(epoch + 1))
    skipped = 0
    while skipped < position:
        skipped += len(next(replay)[1])
    rest = TOTAL - batch * table.BATCH
    count = -(-rest // table.BATCH)  # the batches left in the epoch, the last partial
    expected = labels(replay, count)
    assert labels(iter(table.plain_resume(urls, PER_SHARD, position)), count + 1) == expected
    assert sum(map(len, expected)) == rest


def test_the_first_pass_scans_again_once_the_index_files_are_removed(urls: str) -> None:
    folder = os.path.dirname(table.wds.shardlists.expand_urls(urls)[0])
    table.ours(urls)
    assert sum(name.endswith(".index.npz") for name in os.listdir(folder)) == SHARDS
    table.remove_indexes(folder)
    assert not any(name.endswith(".index.npz") for name in os.listdir(folder))
    assert table.rate(lambda: table.ours(urls, repeat=False), 0, TOTAL, 1) > 0
    assert sum(name.endswith(".index.npz") for name in os.listdir(folder)) == SHARDS
