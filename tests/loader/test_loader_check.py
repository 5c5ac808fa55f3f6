from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch.utils.data as tud
from hypothesis import given
from hypothesis import strategies as st
from loader_helpers import Noisy

from detsamplers import (
    DistributedSampler,
    RepeatSampler,
    ReproducibilityError,
    ReproducibleShuffleBatchSampler,
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


class Wrapper(tud.Sampler[int]):
    """A user's sampler that iterates what it holds (at ``path``), claiming ``length`` items."""

    def __init__(self, held: object, path: list[str], length: int) -> None:
        self.length, self.path = length, path
        self.held: object = held
        for step in reversed(path):
            self.held = {"box": self.held} if step == "dict" else [self.held]

    def __iter__(self) -> Iterator[int]:
        inner: object = self.held
        for step in self.path:
            inner = inner["box"] if step == "dict" else inner[0]  # type: ignore[index]
        return iter(inner)  # type: ignore[call-overload]

    def __len__(self) -> int:
        return self.length


ENDLESS = (
    r"ReproducibleShuffleSampler would read its pass forever: the sampler it shuffles "
    r"\(Wrapper\) holds Wrapper\.held\S*, a RepeatSampler, whose stream is endless; a shuffle "
    r"reads a whole pass before its first item, .* shuffle first, e\.g\. "
    r"RepeatSampler\(ReproducibleShuffleSampler\(sampler, seed\)\)"
)


@given(
    path=st.lists(st.sampled_from(["list", "dict"]), max_size=3),
    endless=st.booleans(),
    through_torch=st.booleans(),
)
def test_a_shuffle_over_a_repeat_hidden_in_a_wrapper_is_refused_as_iterating_it_would_be(
    path: list[str], endless: bool, through_torch: bool
) -> None:
    held = RepeatSampler(range(5)) if endless else ReproducibleShuffleSampler(range(5), 1)
    chain = ReproducibleShuffleSampler(Wrapper(held, path, 5), 0)
    checked = tud.DataLoader(range(5), sampler=chain) if through_torch else chain
    if not endless:  # a finite pass: checked and read as before
        check_reproducible(checked)
        assert sorted(chain) == list(range(5))
        return
    with pytest.raises(ReproducibilityError, match=ENDLESS):
        check_reproducible(checked)
    with pytest.raises(ValueError, match=r"read more than len\(sampler\)=5 items from pass 0"):
        next(iter(chain))  # what the check spares: the same refusal, once iterating


def test_our_data_loader_refuses_a_hidden_repeat_under_a_shuffle_when_built() -> None:
    shuffled = ReproducibleShuffleSampler(Wrapper(RepeatSampler(range(4)), [], 4), 0)
    with pytest.raises(ReproducibilityError, match=r"holds Wrapper\.held, a RepeatSampler"):
        DataLoader(Noisy(4), sampler=shuffled)
    batches = tud.BatchSampler(RepeatSampler(range(4)), 2, False)
    batch_shuffle = ReproducibleShuffleBatchSampler(Wrapper(batches, ["list"], 2), 0)
    with pytest.raises(ReproducibilityError, match=r"holds Wrapper\.held\[0\]\.sampler, a Rep"):
        DataLoader(Noisy(4), batch_sampler=batch_shuffle)
