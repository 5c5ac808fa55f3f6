from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch.utils.data as tud
from loader_helpers import Noisy

from detsamplers import (
    DistributedSampler,
    RepeatSampler,
    ReproducibilityError,
    ReproducibleShuffleSampler,
    SkipBatchSampler,
)
from detsamplers.loader import DataLoader, check_reproducible


class Stream(tud.IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(3))


class Resumable(Stream):
    def state_dict(self) -> dict[str, int]:
        return {}

    def load_state_dict(self, state: dict[str, int]) -> None:
        pass


class Custom(tud.Sampler[int]):
    def __iter__(self) -> Iterator[int]:
        return iter([2, 0, 1])

    def __len__(self) -> int:
        return 3


RANDOM_GLOBAL = r"torch's RandomSampler draws each pass's order from torch's global RNG \(shuffle"
FIX = r"use detsamplers\.loader\.DataLoader\(dataset, shuffle=True, seed=\.\.\.\)"


def test_torch_shuffle_without_a_generator_is_refused() -> None:
    with pytest.raises(ReproducibilityError, match=f"{RANDOM_GLOBAL}.*{FIX}"):
        check_reproducible(tud.DataLoader(range(10), shuffle=True))


def test_torch_random_sampler_with_a_generator_is_refused() -> None:
    import torch

    sampler = tud.RandomSampler(range(10), generator=torch.Generator())
    with pytest.raises(ReproducibilityError, match="from the current state of its generator"):
        check_reproducible(tud.BatchSampler(sampler, 2, False))


def test_sharding_before_shuffling_is_refused() -> None:
    chain = ReproducibleShuffleSampler(DistributedSampler(range(10), num_workers=2, rank=0), 0)
    with pytest.raises(
        ReproducibilityError,
        match=r"this chain \(source > shard > shuffle\) shards before it shuffles.*"
        "the order is shuffle → repeat → shard → batch → skip",
    ):
        check_reproducible(chain)


def test_sharding_before_repeating_is_refused() -> None:
    chain = RepeatSampler(DistributedSampler(range(10), num_workers=2, rank=1))
    batches = SkipBatchSampler(tud.BatchSampler(chain, 2, False), 1)
    with pytest.raises(
        ReproducibilityError, match=r"shard > repeat > batch > skip\) shards before it repeats"
    ):
        check_reproducible(batches)


def test_a_foreign_sampler_in_a_training_chain_cannot_seek() -> None:
    chain = DistributedSampler(RepeatSampler(Custom()), num_workers=1, rank=0)
    with pytest.raises(
        ReproducibilityError, match=r"test_loader_check\.Custom cannot seek: it is not"
    ):
        check_reproducible(chain)
    with pytest.raises(ReproducibilityError, match="Custom cannot seek"):
        DataLoader(Noisy(3), sampler=Custom()).get_data_loader(repeat=True)
    with pytest.raises(ReproducibilityError, match="Custom cannot seek"):
        check_reproducible(DataLoader(Noisy(3), sampler=Custom()))


def test_an_iterable_dataset_without_the_protocol_is_refused() -> None:
    message = r"Stream is an IterableDataset without the resume protocol \(state_dict\(\) and"
    with pytest.raises(ReproducibilityError, match=message):
        check_reproducible(tud.DataLoader(Stream(), batch_size=2))
    with pytest.raises(ReproducibilityError, match=message):
        check_reproducible(Stream())
    check_reproducible(tud.DataLoader(Resumable(), batch_size=2))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.parametrize("world", [1, 3])
def test_anything_get_data_loader_returns_passes(shuffle: bool, repeat: bool, world: int) -> None:
    loader = DataLoader(Noisy(10), batch_size=2, shuffle=shuffle)
    for rank in range(world):
        check_reproducible(loader.get_data_loader(repeat, 0, world, rank))
    check_reproducible(loader)


def test_user_samplers_slotted_into_the_chain_pass() -> None:
    check_reproducible(DataLoader(Noisy(4), sampler=range(3, -1, -1)).get_data_loader(True, 2))
    batches = tud.BatchSampler(tud.SequentialSampler(range(4)), 3, False)
    check_reproducible(DataLoader(Noisy(4), batch_sampler=batches).get_data_loader(True, 1))
    check_reproducible(DataLoader(Noisy(3), sampler=Custom()).get_data_loader(repeat=False))


def test_check_reproducible_rejects_what_it_cannot_check() -> None:
    with pytest.raises(TypeError, match="loader_or_sampler should be a DataLoader"):
        check_reproducible(3)
