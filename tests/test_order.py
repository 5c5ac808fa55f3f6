"""Misordered chains fail at construction; bad arguments name the parameter and value."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch.utils.data as tud

import detsamplers as ds
from tests.helpers import ForeignSampler


def skip_chain() -> Any:
    return ds.SkipSampler(ds.RepeatSampler(range(4)), 2)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: ds.ReproducibleShuffleSampler(ds.RepeatSampler(range(4)), 0),
            r"ReproducibleShuffleSampler cannot wrap this sampler, which is infinite"
            r" .* shuffle first",
        ),
        (
            lambda: ds.RepeatSampler(ds.SkipSampler(range(4), 1)),
            r"RepeatSampler cannot wrap this sampler, whose chain contains a skip:"
            r" .* apply the skip last",
        ),
        (
            lambda: ds.RepeatSampler(ds.RepeatSampler(range(4))),
            r"RepeatSampler cannot wrap this sampler, which is already infinite"
            r" .* repeat exactly once",
        ),
        (lambda: ds.SkipSampler(skip_chain(), 1), r"SkipSampler cannot wrap .* contains a skip"),
        (
            lambda: ds.DistributedSampler(skip_chain(), 2, 0),
            r"DistributedSampler cannot wrap .* contains a skip",
        ),
        (
            lambda: ds.DistributedSampler(ds.DistributedSampler(range(4), 2, 0), 2, 0),
            r"already sharded: .* shard exactly once",
        ),
        (
            lambda: ds.DistributedBatchSampler(
                tud.BatchSampler(ds.DistributedSampler(range(8), 2, 0), 2, False), 2, 0
            ),
            r"DistributedBatchSampler cannot wrap this batch_sampler, which is already sharded",
        ),
        (
            lambda: ds.SkipBatchSampler(tud.BatchSampler(skip_chain(), 2, False), 1),
            r"SkipBatchSampler cannot wrap this batch_sampler, whose chain contains a skip",
        ),
        (
            lambda: ds.ReproducibleShuffleBatchSampler(
                tud.BatchSampler(ds.RepeatSampler(range(4)), 2, False), 0
            ),
            r"which is infinite",
        ),
    ],
)
def test_a_chain_that_would_hang_or_corrupt_fails_at_construction_naming_the_order(
    build: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as info:
        build()
    assert "shuffle → repeat → shard → batch → skip" in str(info.value)


def test_valid_but_non_elastic_orders_are_left_to_the_loader_checks() -> None:
    ds.ReproducibleShuffleSampler(ds.DistributedSampler(range(8), 2, 0), 0)
    ds.RepeatSampler(ds.DistributedSampler(range(8), 2, 1))


@pytest.mark.parametrize("source", [range(0), ForeignSampler([])], ids=["addressable", "foreign"])
def test_repeating_an_empty_sampler_raises_when_iteration_starts(source: Any) -> None:
    sampler = ds.RepeatSampler(source)  # construction is fine
    with pytest.raises(ValueError, match="cannot repeat an empty sampler: it would spin forever"):
        next(iter(sampler))


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (
            lambda: ds.DistributedSampler(range(4), 0, 0),
            ValueError,
            "num_workers should be a positive integer value, but got num_workers=0",
        ),
        (
            lambda: ds.DistributedSampler(range(4), 2, 2),
            ValueError,
            r"rank should be an integer in \[0, num_workers\), but got rank=2 with num_workers=2",
        ),
        (
            lambda: ds.DistributedSampler(range(4), 2, True),
            TypeError,
            "rank should be an integer value, but got rank=True of type bool",
        ),
        (
            lambda: ds.DistributedSampler(range(4), 2.0, 0),
            TypeError,
            "num_workers should be a positive integer value, but got num_workers=2.0 of type float",
        ),
        (
            lambda: ds.DistributedSampler(range(4), 2, 0, world_size=2),
            TypeError,
            "pass the world size once",
        ),
        (lambda: ds.DistributedSampler(range(4), rank=0), TypeError, "missing the world size"),
        (lambda: ds.DistributedSampler(range(4), world_size=2), TypeError, "missing the rank"),
        (
            lambda: ds.SkipSampler(range(4), -1),
            ValueError,
            "skip should be a non-negative integer value, but got skip=-1",
        ),
        (
            lambda: ds.SkipBatchSampler(range(4), False),
            TypeError,
            "skip should be an integer value",
        ),
        (
            lambda: ds.ReproducibleShuffleSampler(range(4), "0"),
            TypeError,
            "seed should be an integer value, but got seed='0' of type str",
        ),
        (
            lambda: ds.ReproducibleShuffleSampler(range(4), 0, permutation="random"),
            ValueError,
            "permutation should be one of 'feistel', 'exact', but got permutation='random'",
        ),
        (
            lambda: ds.make_batch_sampler(range(4), "train", 0, 1, 0, 2, 0),
            ValueError,
            "mode should be one of 'training', 'validation', but got mode='train'",
        ),
        (
            lambda: ds.make_batch_sampler(range(4), "training", 0, 1, 0, 0, 0),
            ValueError,
            "batch_size should be a positive integer value, but got batch_size=0",
        ),
        (
            lambda: ds.make_batch_sampler(range(4), "validation", 0, 1, 0, 2, 3),
            ValueError,
            "skip should be 0 in validation mode, but got skip=3",
        ),
        (
            lambda: ds.make_batch_sampler(range(4), "training", 0, 2, 0, 2, world_size=2),
            TypeError,
            "pass the world size once, as num_workers or as world_size, but got "
            "num_workers=2 and world_size=2",
        ),
        (
            lambda: ds.make_batch_sampler(range(4), "training", 0, rank=0, batch_size=2),
            TypeError,
            "missing the world size",
        ),
        (
            lambda: ds.make_batch_sampler(range(4), "training", 0, world_size=2, batch_size=2),
            TypeError,
            "missing rank: pass rank, an integer",
        ),
        (
            lambda: ds.make_batch_sampler(range(4), "training", 0, world_size=2, rank=0),
            TypeError,
            "missing batch_size: pass batch_size, an integer",
        ),
        (
            lambda: ds.make_batch_sampler(
                range(4), "training", 0, world_size=2, rank=2, batch_size=1
            ),
            ValueError,
            r"rank should be an integer in \[0, world_size\), but got rank=2 with world_size=2",
        ),
        (
            lambda: ds.make_batch_sampler(
                range(4), "training", 0, world_size=0, rank=0, batch_size=1
            ),
            ValueError,
            "world_size should be a positive integer value, but got world_size=0",
        ),
        (
            lambda: ds.make_batch_sampler(object(), "training", 0, 1, 0, 2, 0),
            TypeError,
            "sampler_or_dataset should be a sampler or a map-style dataset",
        ),
        (
            lambda: ds.ReproducibleShuffleSampler(range(2**62 + 1), 0),
            ValueError,
            "can shuffle at most 2\\*\\*62 items, but this sampler has 4611686018427387905",
        ),
        (
            lambda: ds.ReproducibleShuffleSampler(range(4), 0).set_epoch(-1),
            ValueError,
            "epoch should be a non-negative integer value, but got epoch=-1",
        ),
        (
            lambda: ds.ReproducibleShuffleSampler(range(2**62 + 1), 0),
            ValueError,
            r"can shuffle at most 2\*\*62 items, but this sampler has 4611686018427387905",
        ),
    ],
)
def test_bad_arguments_raise_a_clear_error_naming_parameter_and_value(
    build: Any, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        build()


def test_numpy_integers_are_accepted_where_an_int_is_meant() -> None:
    sampler = ds.DistributedSampler(range(6), np.int64(2), np.int32(1))
    assert list(sampler) == [1, 3, 5]
