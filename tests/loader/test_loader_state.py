from __future__ import annotations

import copy
import json
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loader_helpers import Noisy, take
from torch.utils.data import BatchSampler

from detsamplers import ReproducibilityError
from detsamplers.loader import DataLoader

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchdata.stateful_dataloader import StatefulDataLoader


def state_after(loader: DataLoader, consumed: int) -> dict[str, Any]:
    train = loader.get_data_loader(repeat=True)
    take(train, consumed)
    return train.batch_sampler.state_dict()  # type: ignore[union-attr, no-any-return]


def fresh(loader: DataLoader) -> Any:
    return loader.get_data_loader(repeat=True).batch_sampler


def test_the_state_is_json_able_and_a_fresh_dict_each_call() -> None:
    batches = fresh(DataLoader(Noisy(7), batch_size=2, shuffle=True))
    first, second = batches.state_dict(), batches.state_dict()
    assert first == second and first is not second
    assert first["loader"] is not second["loader"]
    first["loader"]["seed"] = 99
    assert batches.state_dict() == second
    assert json.loads(json.dumps(second)) == second
    keys = {"version", "position", "fingerprint", "chain", "samples", "loader", "digest"}
    assert set(second) == keys


def test_a_changed_dataset_length_is_named_on_load() -> None:
    state = state_after(DataLoader(Noisy(10), batch_size=2, shuffle=True), 3)
    with pytest.raises(ReproducibilityError, match="dataset_length is 10 in the state but 12 here"):
        fresh(DataLoader(Noisy(12), batch_size=2, shuffle=True)).load_state_dict(state)


def test_a_changed_seed_is_named_on_load_even_without_shuffle() -> None:
    state = state_after(DataLoader(Noisy(10), batch_size=2, seed=0), 3)
    with pytest.raises(ReproducibilityError, match="seed is 0 in the state but 1 here"):
        fresh(DataLoader(Noisy(10), batch_size=2, seed=1)).load_state_dict(state)


def test_a_changed_sample_stream_is_named_on_load() -> None:
    state = state_after(DataLoader(Noisy(10), batch_size=2, shuffle=True), 3)
    with pytest.raises(ReproducibilityError, match=r"the sample stream differs.*stages differ"):
        fresh(DataLoader(Noisy(10), batch_size=2)).load_state_dict(state)


@pytest.mark.parametrize(("size", "world", "rank"), [(3, 1, 0), (2, 2, 1), (1, 3, 2), (5, 2, 0)])
def test_another_batch_size_world_size_or_rank_continues_at_the_saved_sample(
    size: int, world: int, rank: int
) -> None:
    stream = [
        int(i)
        for b in take(DataLoader(range(10), batch_size=1, shuffle=True).get_data_loader(True), 40)
        for i in b
    ]
    state = state_after(DataLoader(Noisy(10), batch_size=2, shuffle=True), 3)  # samples 0-5
    target = DataLoader(Noisy(10), batch_size=size, shuffle=True)
    train = target.get_data_loader(True, 0, world, rank)
    train.batch_sampler.load_state_dict(state)  # type: ignore[union-attr]
    batches = take(train, 2)
    expected = [[stream[6 + (b * size + j) * world + rank] for j in range(size)] for b in range(2)]
    assert [[int(row[0]) for row in batch] for batch in batches] == expected


def test_a_batch_sampler_loader_still_refuses_another_world_size() -> None:
    def loader() -> DataLoader:
        return DataLoader(Noisy(10), batch_sampler=BatchSampler(range(10), 2, False))

    train = loader().get_data_loader(True)
    take(train, 2)
    state = train.batch_sampler.state_dict()  # type: ignore[union-attr]
    assert state["samples"] is None
    target = loader().get_data_loader(True, 0, 2, 1).batch_sampler
    with pytest.raises(ReproducibilityError, match="num_replicas is 1 in the state but 2 here"):
        target.load_state_dict(state)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="skip_samples should be 0 for a DataLoader built with"):
        loader().get_data_loader(True, skip_samples=3)


def test_a_stream_that_differs_under_the_same_configuration_is_refused() -> None:
    loader = DataLoader(Noisy(10), batch_size=2, shuffle=True)
    state = state_after(loader, 4)
    forged = copy.deepcopy(state)
    forged["digest"] = "0" * 16
    with pytest.raises(ReproducibilityError, match="the batches before sample 8 differ"):
        fresh(loader).load_state_dict(forged)
    fresh(loader).load_state_dict(state)


def test_a_state_that_was_not_saved_by_the_loader_is_refused() -> None:
    batches = fresh(DataLoader(Noisy(10), batch_size=2))
    state = batches.state_dict()
    del state["digest"]
    with pytest.raises(ValueError, match="lacks digest; it was not saved by a detsamplers"):
        batches.load_state_dict(state)
    with pytest.raises(TypeError, match="state should be a dict"):
        batches.load_state_dict([1])


@settings(max_examples=30, deadline=None)
@given(length=st.integers(1, 20), seed=st.integers(0, 3), consumed=st.integers(0, 15))
def test_a_state_always_loads_into_an_identical_loader_at_its_position(
    length: int, seed: int, consumed: int
) -> None:
    loader = DataLoader(range(length), batch_size=3, shuffle=True, seed=seed)
    state = state_after(loader, consumed)
    target = fresh(loader)
    target.load_state_dict(state)
    assert target.state_dict() == state


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_statefuldataloader_checkpoints_and_resumes_the_loader(num_workers: int) -> None:
    loader = DataLoader(Noisy(7), batch_size=2, shuffle=True, seed=5, num_workers=num_workers)
    reference = take(
        DataLoader(Noisy(7), batch_size=2, shuffle=True, seed=5).get_data_loader(True), 9
    )
    first = loader.get_data_loader(repeat=True, loader_class=StatefulDataLoader)
    assert take(first, 4) == reference[:4]
    state = first.state_dict()  # type: ignore[attr-defined]
    second = loader.get_data_loader(repeat=True, loader_class=StatefulDataLoader)
    second.load_state_dict(state)  # type: ignore[attr-defined]
    assert take(second, 5) == reference[4:9]
