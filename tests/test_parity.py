"""Unshuffled chains follow the sampler rules, on both paths.

The expected sequences here come from the rules (tests/helpers.py); the parity with
Determined itself, outputs and len() of every stage, is tests/test_determined_parity.py,
which builds every chain with the installed ``determined.pytorch.samplers``. Every chain is
also built over a ForeignSampler with the same values, which cannot be addressed and so
exercises the iterate-and-filter fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

import detsamplers as ds
from tests.helpers import (
    ForeignSampler,
    ceil_div,
    ref_batches,
    ref_repeat,
    ref_shard,
    take,
)

sizes = st.integers(min_value=0, max_value=40)
worlds = st.integers(min_value=1, max_value=5)
batch_sizes = st.integers(min_value=1, max_value=6)
skips = st.integers(min_value=0, max_value=30)

Source = Callable[[int], Any]
SOURCES: list[Source] = [
    lambda n: tud.SequentialSampler(range(n)),
    lambda n: range(n),
    lambda n: ForeignSampler(range(n)),
]
SOURCE_IDS = ["sequential", "range", "foreign"]


@pytest.mark.parametrize("source", SOURCES, ids=SOURCE_IDS)
@given(n=sizes, world=worlds, data=st.data())
def test_shard_of_a_finite_sampler_filters_positions_and_reports_its_exact_length(
    source: Source, n: int, world: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    sampler = ds.DistributedSampler(source(n), num_workers=world, rank=rank)
    assert list(sampler) == ref_shard(range(n), world, rank)
    assert list(sampler) == ref_shard(range(n), world, rank)  # a second pass is the same
    assert len(sampler) == len(range(rank, n, world))


@pytest.mark.parametrize("source", SOURCES, ids=SOURCE_IDS)
@given(n=st.integers(1, 30), world=worlds, skip=skips, data=st.data())
def test_skip_over_shard_over_repeat_matches_the_rules(
    source: Source, n: int, world: int, skip: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    sampler = ds.SkipSampler(
        ds.DistributedSampler(ds.RepeatSampler(source(n)), num_workers=world, rank=rank), skip
    )
    endless = ref_repeat(range(n), (skip + 40) * world)
    assert take(sampler, 40) == ref_shard(endless, world, rank)[skip : skip + 40]
    assert len(sampler) == len(range(rank, n, world))


@pytest.mark.parametrize("source", SOURCES, ids=SOURCE_IDS)
@given(
    n=st.integers(1, 30),
    world=worlds,
    size=batch_sizes,
    skip=skips,
    drop_last=st.booleans(),
    data=st.data(),
)
def test_the_seeds_training_chain_without_shuffle_matches_the_rules(
    source: Source, n: int, world: int, size: int, skip: int, drop_last: bool, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    shard = ds.DistributedSampler(ds.RepeatSampler(source(n)), num_workers=world, rank=rank)
    chain = ds.SkipBatchSampler(tud.BatchSampler(shard, size, drop_last), skip)
    records = ref_shard(ref_repeat(range(n), (skip + 12) * size * world), world, rank)
    expected = ref_batches(records, size, drop_last=True)[skip : skip + 10]
    assert take(chain, 10) == expected
    share = len(range(rank, n, world))
    assert len(chain) == (share // size if drop_last else ceil_div(share, size))


@pytest.mark.parametrize("source", SOURCES, ids=SOURCE_IDS)
@given(n=sizes, size=batch_sizes, drop_last=st.booleans(), world=worlds, skip=skips, data=st.data())
def test_batch_variants_over_a_finite_batch_sampler_match_the_rules(
    source: Source, n: int, size: int, drop_last: bool, world: int, skip: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    batches = ref_batches(range(n), size, drop_last)

    def base() -> tud.BatchSampler:
        return tud.BatchSampler(source(n), size, drop_last)

    shard = ds.DistributedBatchSampler(base(), num_workers=world, rank=rank)
    assert list(shard) == ref_shard(batches, world, rank)
    assert len(shard) == len(range(rank, len(batches), world)) == len(list(shard))
    skipped = ds.SkipBatchSampler(base(), skip)
    assert list(skipped) == batches[skip:]
    assert len(skipped) == len(batches)
    if batches:
        repeated = ds.RepeatBatchSampler(base())
        assert take(repeated, 3 * len(batches) + 1) == ref_repeat(batches, 3 * len(batches) + 1)
        assert len(repeated) == len(batches)
        chain = ds.SkipBatchSampler(
            ds.DistributedBatchSampler(ds.RepeatBatchSampler(base()), world, rank), skip
        )
        endless = ref_repeat(batches, (skip + 8) * world)
        assert take(chain, 8) == ref_shard(endless, world, rank)[skip : skip + 8]


@pytest.mark.parametrize("source", SOURCES, ids=SOURCE_IDS)
@given(n=sizes, skip=skips)
def test_skip_over_a_finite_sampler_drops_the_first_items_and_keeps_len(
    source: Source, n: int, skip: int
) -> None:
    sampler = ds.SkipSampler(source(n), skip)
    assert list(sampler) == list(range(n))[skip:]
    assert len(sampler) == n


def test_seed_helper_validation_mode_shards_without_repeat_or_padding() -> None:
    assert list(ds.make_batch_sampler(range(7), "validation", 0, 3, 0, 2)) == [[0, 3], [6]]
    assert list(ds.make_batch_sampler(range(7), "validation", 0, 3, 2, 2)) == [[2, 5]]


def test_seed_helper_accepts_a_map_style_dataset() -> None:
    dataset = tud.TensorDataset(__import__("torch").arange(6))
    batches = ds.make_batch_sampler(dataset, "validation", 0, 1, 0, 4)
    assert list(batches) == [[0, 1, 2, 3], [4, 5]]


@settings(max_examples=30)
@given(n=st.integers(1, 20), world=worlds, data=st.data())
def test_foreign_and_addressable_sources_give_the_same_shuffled_stream(
    n: int, world: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    seed = data.draw(st.integers(0, 2**32))

    def chain(source: Any) -> Any:
        shuffle = ds.ReproducibleShuffleSampler(source, seed)
        return ds.DistributedSampler(ds.RepeatSampler(shuffle), num_workers=world, rank=rank)

    assert take(chain(range(n)), 3 * n) == take(chain(ForeignSampler(range(n))), 3 * n)
