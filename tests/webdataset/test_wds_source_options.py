"""A source's arguments checked in one pass and grouped (NOTE [ source options ])."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds

from detsamplers.loader import WebDatasetSource
from detsamplers.loader._wds._source_options import source_options
from detsamplers.loader._wds.order._rank_batches import BatchShape

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "batch_size": 2,
    "world_size": 1,
    "rank": 0,
    "decode": None,
    "map": None,
    "collate_fn": None,
    "shuffle_shards": True,
    "shuffle_window": 0,
    "shuffle_block_shards": 0,
    "repeat": True,
    "drop_last": False,
    "skip": 0,
    "skip_samples": 0,
    "index_dir": None,
    "storage_options": None,
    "timeout": 60.0,
    "retries": 5,
    "read_ahead": 4 << 20,
    "seeding": "batch",
    "parts": None,
    "cache_dir": None,
    "cache_limit": None,
    "prefetch": 8,
}


def test_the_groups_are_frozen_and_hold_the_checked_values(tmp_path: Path) -> None:
    options = source_options(str(tmp_path / "s-{0..1}.tar"), **{**DEFAULTS, "skip": 3})
    assert options.order.skip == 3 and len(options.storage.urls) == 2
    assert options.storage.remote.read_ahead == 4 << 20
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.order.skip = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        ({"batch_size": 0, "prefetch": 0, "timeout": 0}, "batch_size"),
        ({"shuffle_window": -1, "cache_limit": 0}, "shuffle_window"),
        ({"prefetch": 0, "timeout": 0}, "prefetch"),
        ({"timeout": 0}, "timeout"),
    ],
)
def test_of_several_wrong_arguments_the_first_a_user_reads_is_named(
    tmp_path: Path, wrong: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{named} should be"):
        source_options(str(tmp_path / "s.tar"), **{**DEFAULTS, **wrong})


def test_the_source_keeps_its_attributes_and_names_its_batch_shape(tmp_path: Path) -> None:
    with wds.ShardWriter(str(tmp_path / "s-%d.tar"), maxcount=5, verbose=0) as sink:
        for i in range(10):
            sink.write({"__key__": f"k{i}", "cls": b"0"})
    source = WebDatasetSource(
        str(tmp_path / "s-{0..1}.tar"), seed=4, batch_size=3, world_size=2, rank=1,
        shuffle_block_shards=1, repeat=False, skip=1, prefetch=3, cache_dir=False,
    )  # fmt: skip
    assert (source.seed, source.batch_size, source.world_size, source.rank) == (4, 3, 2, 1)
    assert (source.shuffle_block_shards, source.repeat, source.prefetch) == (0, False, 3)
    assert source.cache_dir is False and source.position == 6
    assert source._shape() == BatchShape(batch_size=3, world_size=2, rank=1, limit=10, origin=0)
