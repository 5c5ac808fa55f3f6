"""detsamplers.loader.DataLoader over a MixSampler: mixed datasets as one loader."""

from __future__ import annotations

import json
from itertools import islice
from typing import Any

import pytest
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st
from loader_helpers import Noisy, take

import detsamplers as ds
from detsamplers.loader import DataLoader, check_reproducible

LENGTHS, WEIGHTS, B = [7, 4, 3], [0.6, 0.25, 0.15], 3


class Tagged(Noisy):
    """Noisy records whose index is offset by 100 per dataset, to see where items come from."""

    def __init__(self, length: int, tag: int) -> None:
        super().__init__(length)
        self.tag = tag

    def __getitem__(self, index: int) -> Any:
        row = super().__getitem__(index)
        row[0] += 100 * self.tag
        return row


def make(num_workers: int = 0, **kwargs: Any) -> DataLoader:
    datasets = [Tagged(n, k) for k, n in enumerate(LENGTHS)]
    mix = ds.MixSampler.from_datasets(datasets, WEIGHTS, seed=5, **kwargs)
    return DataLoader(
        tud.ConcatDataset(datasets), sampler=mix, batch_size=B, num_workers=num_workers, seed=2
    )


def test_items_from_component_k_come_from_dataset_k() -> None:
    loader = make()
    got = take(loader.get_data_loader(repeat=True), 20)
    mix = ds.MixSampler.from_datasets([range(n) for n in LENGTHS], WEIGHTS, seed=5)
    indices = take_indices(mix, 20 * B)
    offsets = [0, 7, 11]
    for index, row in zip(indices, [row for batch in got for row in batch], strict=True):
        tag = max(k for k in range(3) if offsets[k] <= index)
        assert int(row[0]) == 100 * tag + index - offsets[tag]
    tags = [int(row[0]) // 100 for batch in got for row in batch]
    assert [tags.count(k) for k in range(3)] == [36, 15, 9]


def take_indices(sampler: Any, count: int) -> list[int]:
    return list(islice(iter(sampler), count))


@pytest.mark.workers
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_batches_and_draws_do_not_depend_on_num_workers() -> None:
    runs = [take(make(num_workers=w).get_data_loader(repeat=True, skip=3), 8) for w in (0, 1, 2)]
    assert runs[0] == runs[1] == runs[2]


@settings(max_examples=6)
@given(world=st.integers(1, 3), data=st.data())
def test_a_saved_loader_state_resumes_the_mixture_exactly(world: int, data: st.DataObject) -> None:
    rank = data.draw(st.integers(0, world - 1))
    consumed = data.draw(st.integers(0, 12))
    loader = make()
    straight = take(
        loader.get_data_loader(repeat=True, num_replicas=world, rank=rank), consumed + 4
    )
    first = loader.get_data_loader(repeat=True, num_replicas=world, rank=rank)
    iterator = iter(first)
    for _ in range(consumed):
        next(iterator)
    state = json.loads(json.dumps(first.batch_sampler.state_dict()))
    assert state["mixture"]["position"] == consumed * B * world
    again = make().get_data_loader(repeat=True, num_replicas=world, rank=rank)
    again.batch_sampler.load_state_dict(state)
    assert take(again, 4) == straight[consumed:]


def test_a_changed_weight_is_refused_on_load() -> None:
    state = make().get_data_loader(repeat=True, skip=2).batch_sampler.state_dict()
    datasets = [Tagged(n, k) for k, n in enumerate(LENGTHS)]
    mix = ds.MixSampler.from_datasets(datasets, [0.5, 0.35, 0.15], seed=5)
    other = DataLoader(tud.ConcatDataset(datasets), sampler=mix, batch_size=B, seed=2)
    with pytest.raises(ds.ReproducibilityError, match="mix weights is"):
        other.get_data_loader(repeat=True).batch_sampler.load_state_dict(state)


def test_a_mixture_loader_is_for_training_only_and_passes_check_reproducible() -> None:
    loader = make()
    check_reproducible(loader)
    check_reproducible(loader.get_data_loader(repeat=True))
    with pytest.raises(ValueError, match="repeat should be True for a loader over an endless"):
        loader.get_data_loader(repeat=False)
    with pytest.raises(ValueError, match="repeat should be True"):
        len(loader)


def test_a_dataset_that_is_not_the_concatenation_is_refused() -> None:
    datasets = [Tagged(n, k) for k, n in enumerate(LENGTHS)]
    mix = ds.MixSampler.from_datasets(datasets, WEIGHTS, seed=5)
    with pytest.raises(ValueError, match=r"dataset should have the 14 records .* len\(dataset\)=7"):
        DataLoader(datasets[0], sampler=mix, batch_size=B)
