"""Per-batch and per-record seeding (detsamplers/loader/_seeding.py, NOTE [ per-batch seeding ]).

Laws: a batch's key is a function of ``(seed, position)``, one key per position (no two
positions of a seed share one), and the vectorised keys are the scalar ones; the draws made
while fetching a positioned batch depend on its key and indices only, never on the global
RNG states before it; with per-record seeding, record ``j`` of the batch at ``g`` with
stride ``W`` draws what a batch of that record alone at ``g + j W`` draws.
"""

from __future__ import annotations

import pickle
import random
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from detsamplers.loader._seeding import (
    PositionedBatch,
    batch_key,
    batch_keys,
    fetch_seeded,
    positioned_batch,
    record_base,
    seed_globals,
)

seeds = st.integers(0, 2**63 - 1)
positions_st = st.integers(0, 2**62)


class Noisy(torch.utils.data.Dataset[tuple[int, float, float, float]]):
    """Each record draws from torch, numpy's global RandomState and ``random``."""

    def __len__(self) -> int:
        return 100

    def __getitem__(self, index: int) -> tuple[int, float, float, float]:
        return index, torch.rand(()).item(), float(np.random.rand()), random.random()


class NoisyBatches(Noisy):
    """Fetches a batch at once, with one draw for the whole batch."""

    def __getitems__(self, indices: list[int]) -> list[Any]:
        shared = random.random()
        return [("batched", i, shared) for i in indices]


class EpochAware(Noisy):
    def getitems_in_epochs(self, pairs: list[tuple[int, int]]) -> list[Any]:
        return [(epoch, index, random.random()) for epoch, index in pairs]


@pytest.fixture(autouse=True)
def _keep_global_rng_states() -> Any:
    """Give the other tests of the process back the generators' states as they were."""
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    yield
    torch.set_rng_state(states[0])
    np.random.set_state(states[1])
    random.setstate(states[2])


def scramble(noise: int) -> None:
    """Leave the global generators in some state unrelated to the batch."""
    torch.manual_seed(noise)
    np.random.seed(noise % 2**32)
    random.seed(noise)
    for _ in range(noise % 5):
        torch.rand(()), np.random.rand(), random.random()


@given(seed=seeds, positions=st.lists(positions_st, max_size=50))
def test_batch_keys_are_the_scalar_keys_and_distinct_positions_get_distinct_keys(
    seed: int, positions: list[int]
) -> None:
    keys = batch_keys(seed, np.asarray(positions, dtype=np.int64))
    assert keys == [batch_key(seed, p) for p in positions]
    assert all(0 <= key < 2**64 for key in keys)
    assert len(set(keys)) == len(set(positions))


@given(seed=seeds, position=positions_st)
def test_the_record_base_keys_a_stream_of_its_own_per_seed(seed: int, position: int) -> None:
    assert record_base(seed) == record_base(seed)
    assert record_base(seed) != record_base(seed + 1)
    batch = positioned_batch([0], position, batch_key(seed, position), stride=1)
    assert fetch_seeded(Noisy(), batch) != fetch_seeded(Noisy(), batch, record=record_base(seed))


@given(
    indices=st.lists(st.integers(0, 2**40), max_size=8),
    position=positions_st,
    key=st.integers(0, 2**64 - 1),
    stride=st.integers(0, 64),
    at=st.integers(-1, 10**6),
    epochs=st.none() | st.lists(st.integers(0, 50), max_size=8),
)
def test_a_positioned_batch_pickles_with_its_indices_number_key_stride_place_and_epochs(
    indices: list[int], position: int, key: int, stride: int, at: int, epochs: list[int] | None
) -> None:
    batch = positioned_batch(iter(indices), position, key, stride, at, epochs)
    copy = pickle.loads(pickle.dumps(batch))
    assert isinstance(copy, PositionedBatch)
    assert list(copy) == indices
    assert (copy.position, copy.key, copy.stride, copy.at, copy.epochs) == (
        position,
        key,
        stride,
        at,
        epochs,
    )


@given(
    seed=seeds,
    position=positions_st,
    indices=st.lists(st.integers(0, 99), min_size=1, max_size=6),
    noise=st.lists(st.integers(0, 2**31), min_size=2, max_size=2),
)
def test_a_batchs_draws_depend_on_its_key_and_indices_not_on_the_rng_states_before(
    seed: int, position: int, indices: list[int], noise: list[int]
) -> None:
    batch = positioned_batch(indices, position, batch_key(seed, position))
    scramble(noise[0])
    first = fetch_seeded(Noisy(), batch)
    scramble(noise[1])
    assert fetch_seeded(Noisy(), pickle.loads(pickle.dumps(batch))) == first
    assert [record[0] for record in first] == indices
    other = positioned_batch(indices, position + 1, batch_key(seed, position + 1))
    assert fetch_seeded(Noisy(), other) != first


@given(
    seed=seeds,
    position=st.integers(0, 2**40),
    stride=st.integers(1, 16),
    indices=st.lists(st.integers(0, 99), min_size=1, max_size=6),
    noise=st.integers(0, 2**31),
)
def test_per_record_seeding_draws_for_each_record_what_it_draws_alone_at_its_sample_position(
    seed: int, position: int, stride: int, indices: list[int], noise: int
) -> None:
    record = record_base(seed)
    batch = positioned_batch(indices, position, batch_key(seed, position), stride)
    scramble(noise)
    together = fetch_seeded(Noisy(), batch, record=record)
    alone = []
    for j, index in enumerate(indices):
        sample = position + j * stride
        single = positioned_batch([index], sample, batch_key(seed, sample), stride)
        alone += fetch_seeded(Noisy(), single, record=record)
    assert together == alone
    unstrided = positioned_batch(indices, position, batch_key(seed, position), 0)
    assert fetch_seeded(Noisy(), unstrided, record=record) == fetch_seeded(Noisy(), unstrided)


def test_a_plain_list_is_fetched_unseeded_from_the_states_as_they_are() -> None:
    random.seed(11)
    expected = [random.random(), random.random()]
    random.seed(11)
    assert [r[3] for r in fetch_seeded(Noisy(), [3, 4])] == expected


def test_a_dataset_with_getitems_is_fetched_by_it_once_per_batch_under_the_batch_key() -> None:
    batch = positioned_batch([7, 2, 5], 40, batch_key(3, 40))
    got = fetch_seeded(NoisyBatches(), batch)
    seed_globals(batch_key(3, 40))
    shared = random.random()
    assert got == [("batched", 7, shared), ("batched", 2, shared), ("batched", 5, shared)]


def test_an_epoch_aware_dataset_gets_each_index_with_its_epoch_seeded_per_batch_or_record() -> None:
    batch = positioned_batch([7, 2], 40, batch_key(3, 40), stride=2, epochs=[0, 1])
    per_batch = fetch_seeded(EpochAware(), batch)
    seed_globals(batch_key(3, 40))
    assert per_batch == [(0, 7, random.random()), (1, 2, random.random())]
    per_record = fetch_seeded(EpochAware(), batch, record=record_base(3))
    for j, (epoch, index) in enumerate([(0, 7), (1, 2)]):
        alone = positioned_batch([index], 40 + 2 * j, 0, stride=2, epochs=[epoch])
        assert [per_record[j]] == fetch_seeded(EpochAware(), alone, record=record_base(3))


def test_seeding_the_globals_resets_a_pending_gauss_and_every_generator() -> None:
    seed_globals(2**64 - 1)
    first = torch.rand(3).tolist(), np.random.rand(3).tolist(), random.gauss(0, 1)
    random.gauss(0, 1)  # leaves the pair's second value pending
    seed_globals(2**64 - 1)
    assert (torch.rand(3).tolist(), np.random.rand(3).tolist(), random.gauss(0, 1)) == first
