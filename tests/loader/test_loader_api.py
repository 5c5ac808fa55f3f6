from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.utils.data as tud
from loader_helpers import Noisy, indices, set_worker_flag, take

import detsamplers.loader
from detsamplers import DistributedSampler, RepeatSampler, ReproducibilityError
from detsamplers.loader import DataLoader
from tests.helpers import ForeignSampler


class Stream(tud.IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(3))


def test_the_public_names_are_exported_in_a_sorted_all() -> None:
    names = detsamplers.loader.__all__
    assert (
        names
        == sorted(names)
        == [
            "DataLoader",
            "Network",
            "RunPlan",
            "ShardWriter",
            "SyntheticShards",
            "WebDataLoader",
            "WebDatasetMix",
            "WebDatasetSource",
            "check_reproducible",
            "plan_mixture",
            "plan_run",
        ]
    )
    assert all(hasattr(detsamplers.loader, name) for name in names)


@pytest.mark.subprocess
def test_the_loader_imports_without_webdataset_and_only_shard_writer_needs_it() -> None:
    # webdataset is an optional extra; a None entry in sys.modules makes importing it fail.
    script = (
        "import sys; sys.modules['webdataset'] = None\n"
        "import detsamplers.loader as loader\n"
        "loader.DataLoader(range(4), batch_size=2)\n"
        "try:\n"
        "    loader.ShardWriter\n"
        "except ImportError:\n"
        "    print('ShardWriter needs webdataset')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ShardWriter needs webdataset"
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'"):
        detsamplers.loader.NoSuchName  # noqa: B018


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(("length", "batch"), [(10, 3), (9, 3), (1, 4), (0, 2)])
def test_len_and_iteration_match_torchs_dataloader(
    length: int, batch: int, drop_last: bool
) -> None:
    ours = DataLoader(range(length), batch_size=batch, drop_last=drop_last)
    theirs = tud.DataLoader(range(length), batch_size=batch, drop_last=drop_last)
    assert len(ours) == len(theirs)
    assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]


def test_each_pass_of_a_shuffled_loader_is_a_new_permutation() -> None:
    loader = DataLoader(range(20), batch_size=20, shuffle=True, seed=3)
    first, second = (next(iter(loader)).tolist() for _ in range(2))
    assert sorted(first) == sorted(second) == list(range(20))
    assert first != second
    again = DataLoader(range(20), batch_size=20, shuffle=True, seed=3)
    assert next(iter(again)).tolist() == first


def test_the_seed_defaults_to_the_generators_initial_seed_then_to_zero() -> None:
    generator = torch.Generator()
    generator.manual_seed(42)
    assert DataLoader(range(3), generator=generator).seed == 42
    assert DataLoader(range(3), generator=generator, seed=5).seed == 5
    assert DataLoader(range(3)).seed == 0


def test_a_user_sampler_is_slotted_in_as_the_record_source() -> None:
    loader = DataLoader(Noisy(4), batch_size=3, sampler=[3, 1, 2, 0])
    assert indices(take(loader.get_data_loader(repeat=True), 3)) == [
        [3, 1, 2],
        [0, 3, 1],
        [2, 0, 3],
    ]


def test_a_user_batch_sampler_is_slotted_in_below_the_repeat_and_shard() -> None:
    batches = tud.BatchSampler(tud.SequentialSampler(range(5)), 2, False)
    loader = DataLoader(Noisy(5), batch_sampler=batches)
    assert len(loader) == 3
    got = indices(take(loader.get_data_loader(True, 0, 2, 1), 3))
    assert got == [[2, 3], [0, 1], [4]]


@pytest.mark.workers
def test_the_users_worker_init_fn_still_runs_in_each_worker() -> None:
    loader = DataLoader(Noisy(4), batch_size=2, num_workers=2, worker_init_fn=set_worker_flag)
    assert [row[4] for batch in take(loader, 2) for row in batch] == [7.0] * 4


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    (
        {"batch_size": 0},
        ValueError,
        "batch_size should be a positive integer value, but got batch_size=0",
    ),
    (
        {"batch_size": True},
        TypeError,
        "batch_size should be a positive integer value, but got batch_size=True",
    ),
    ({"batch_size": None}, ValueError, "but got batch_size=None: per-batch seeding"),
    ({"shuffle": 1}, TypeError, "shuffle should be a bool, but got shuffle=1 of type int"),
    (
        {"shuffle": True, "sampler": range(4)},
        ValueError,
        "sampler option is mutually exclusive with shuffle",
    ),
    (
        {"batch_size": 2, "batch_sampler": [[0]]},
        ValueError,
        "batch_sampler option is mutually exclusive",
    ),
    (
        {"num_workers": -1},
        ValueError,
        "num_workers should be a non-negative integer value, but got num_workers=-1",
    ),
    ({"collate_fn": 3}, TypeError, "collate_fn should be a callable or None, but got collate_fn=3"),
    ({"timeout": -1}, ValueError, "timeout should be a non-negative number, but got timeout=-1"),
    ({"timeout": "1"}, TypeError, "timeout should be a non-negative number, but got timeout='1'"),
    (
        {"prefetch_factor": 2},
        ValueError,
        "prefetch_factor can only be set with multi-process loading",
    ),
    (
        {"num_workers": 1, "prefetch_factor": 0},
        ValueError,
        "prefetch_factor should be a positive integer",
    ),
    (
        {"persistent_workers": True},
        ValueError,
        "persistent_workers=True needs multi-process loading",
    ),
    ({"multiprocessing_context": "fork"}, ValueError, "multiprocessing_context can only be used"),
    (
        {"num_workers": 1, "multiprocessing_context": "nope"},
        ValueError,
        "multiprocessing_context should be one of",
    ),
    ({"generator": 3}, TypeError, "generator should be a torch.Generator or None, but got int"),
    ({"seed": 1.5}, TypeError, "seed should be an integer value, but got seed=1.5"),
    ({"sampler": tud.RandomSampler(range(4))}, ReproducibilityError, "torch's RandomSampler draws"),
    ({"sampler": RepeatSampler(range(4))}, ValueError, "sampler should not contain a repeat stage"),
    (
        {"sampler": DistributedSampler(range(4), num_workers=2, rank=0)},
        ValueError,
        "get_data_loader adds repeat, shard and skip itself",
    ),
    ({"sampler": 5}, TypeError, "sampler should be an iterable sampler, but got int"),
]


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD)
def test_bad_arguments_are_each_a_clear_error(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        DataLoader(Noisy(4), **kwargs)


def test_an_iterable_dataset_is_refused_with_a_pointer_to_the_webdataset_source() -> None:
    with pytest.raises(TypeError, match=r"got an IterableDataset \(Stream\).*webdataset source"):
        DataLoader(Stream())
    with pytest.raises(TypeError, match="dataset should be a map-style dataset with __len__"):
        DataLoader(3)


BAD_GET: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"skip": 2}, ValueError, "skip should be 0 when repeat=False, but got skip=2"),
    ({"repeat": True, "skip": -1}, ValueError, "skip should be a non-negative integer value"),
    ({"repeat": 1}, TypeError, "repeat should be a bool, but got repeat=1"),
    ({"num_replicas": 0}, ValueError, "num_replicas should be a positive integer value"),
    (
        {"num_replicas": 2, "rank": 2},
        ValueError,
        r"rank should be an integer in \[0, num_replicas\)",
    ),
    (
        {"loader_class": dict},
        TypeError,
        "loader_class should be a subclass of torch.utils.data.DataLoader",
    ),
]


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD_GET)
def test_bad_get_data_loader_arguments_are_each_a_clear_error(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        DataLoader(Noisy(4)).get_data_loader(**kwargs)


def test_a_sampler_that_cannot_seek_gets_the_same_draws_as_an_addressable_one() -> None:
    # The foreign path keys each batch as it comes, the addressable one a block at a time:
    # the same positions must get the same keys, hence the same draws.
    order = [4, 0, 3, 1, 2]
    for world, rank in [(1, 0), (2, 1)]:
        foreign = DataLoader(Noisy(5), batch_size=2, sampler=ForeignSampler(order), seed=3)
        addressable = DataLoader(Noisy(5), batch_size=2, sampler=order, seed=3)
        ours = foreign.get_data_loader(False, 0, world, rank)
        theirs = addressable.get_data_loader(False, 0, world, rank)
        assert take(ours, 3) == take(theirs, 3)
