"""Hostile input to the DataLoader, its state and check_reproducible is a clear error.

One parametrised case per input under a 20 s alarm (tests/bad_input.py); an error raised by the
user's own code mid-epoch propagates, and the last state saved before it resumes exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import detsamplers as ds
from detsamplers.loader import DataLoader, check_reproducible
from tests.bad_input import (
    Case,
    alarm,  # noqa: F401  # autouse: fails a case that hangs
    assert_clear_error,
)
from tests.helpers import take

# A state of the core chain, which the loader's sampler must refuse.
STATE = ds.SkipSampler(ds.DistributedSampler(ds.RepeatSampler(range(10)), 2, 0), 3).state_dict()


def loader_sampler(**kwargs: Any) -> Any:
    return DataLoader(range(10), batch_size=2, **kwargs).get_data_loader(repeat=True).batch_sampler


LOADER_STATE = loader_sampler().state_dict()


class LenRaises(tud.Dataset[int]):
    def __len__(self) -> int:
        raise RuntimeError("the index file is gone")

    def __getitem__(self, index: int) -> int:
        return index


class Stream(tud.IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(3))


CASES: dict[str, Case] = {
    # The DataLoader.
    "batch_size is a bool": (
        lambda: DataLoader(range(4), batch_size=True),
        TypeError,
        r"batch_size should be a positive integer value, but got batch_size=True",
    ),
    "batch_size is huge": (
        lambda: DataLoader(range(4), batch_size=2**70),
        ValueError,
        r"batch_size should be at most 2\*\*62",
    ),
    "num_workers is negative": (
        lambda: DataLoader(range(4), num_workers=-1),
        ValueError,
        r"num_workers should be a non-negative integer value, but got num_workers=-1",
    ),
    "collate_fn is a string": (
        lambda: DataLoader(range(4), collate_fn="stack"),  # type: ignore[arg-type]
        TypeError,
        r"collate_fn should be a callable or None, but got collate_fn='stack'",
    ),
    "worker_init_fn is an int": (
        lambda: DataLoader(range(4), worker_init_fn=3),  # type: ignore[arg-type]
        TypeError,
        r"worker_init_fn should be a callable or None, but got worker_init_fn=3",
    ),
    "loader rank is past num_replicas": (
        lambda: DataLoader(range(4)).get_data_loader(num_replicas=2, rank=5),
        ValueError,
        r"rank should be an integer in \[0, num_replicas\), but got rank=5",
    ),
    "repeat is an int": (
        lambda: DataLoader(range(4)).get_data_loader(repeat=1),  # type: ignore[arg-type]
        TypeError,
        r"repeat should be a bool, but got repeat=1",
    ),
    "the training dataset is empty": (
        lambda: DataLoader([], batch_size=2, shuffle=True).get_data_loader(repeat=True),
        ValueError,
        r"dataset is empty: len\(dataset\) is 0 for the list this DataLoader was built with",
    ),
    "the dataset's len() raises": (
        lambda: DataLoader(LenRaises()),
        TypeError,
        r"len\(dataset\) raised RuntimeError: the index file is gone \(dataset of type LenRaises\)",
    ),
    "an IterableDataset": (
        lambda: DataLoader(Stream()),
        TypeError,
        r"dataset should be a map-style dataset .* but got an IterableDataset",
    ),
    # Loader states.
    "loader state from another seed": (
        lambda: loader_sampler(seed=5).load_state_dict(LOADER_STATE),
        ds.ReproducibilityError,
        r"seed is 0 in the state but 5 here",
    ),
    "loader state lacks its digest": (
        lambda: loader_sampler().load_state_dict(
            {k: v for k, v in LOADER_STATE.items() if k != "digest"}
        ),
        ValueError,
        r"it lacks digest; it was not saved by a detsamplers.loader DataLoader",
    ),
    "loader state fields are None": (
        lambda: loader_sampler().load_state_dict({**LOADER_STATE, "loader": None}),
        TypeError,
        r"state\['loader'\] should be the dict of loader fields .* but got None",
    ),
    "loader state has an extra field": (
        lambda: loader_sampler().load_state_dict({**LOADER_STATE, "rng": 1}),
        ValueError,
        r"state has keys rng that LoaderBatchSampler.state_dict\(\) never writes",
    ),
    "a plain sampler state into the loader": (
        lambda: loader_sampler().load_state_dict(STATE),
        ValueError,
        r"it lacks loader, digest",
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_hostile_input_to_the_loader_and_its_state_is_a_clear_error(case: str) -> None:
    assert_clear_error(*CASES[case])


GLOBAL_RNG = r"draws each pass's (order|indices) from torch's global RNG \(it has no generator\)"

SWEEP_CASES: dict[str, Case] = {
    "check_reproducible on a SubsetRandomSampler": (
        lambda: check_reproducible(tud.SubsetRandomSampler(range(5))),
        ds.ReproducibilityError,
        r"torch's SubsetRandomSampler " + GLOBAL_RNG + r".* ReproducibleShuffleSampler\(indices",
    ),
    "check_reproducible on a WeightedRandomSampler": (
        lambda: check_reproducible(tud.WeightedRandomSampler([1.0, 2.0], 4)),
        ds.ReproducibilityError,
        r"torch's WeightedRandomSampler " + GLOBAL_RNG + r".* draw the weighted indices once",
    ),
    "check_reproducible on a shuffle over a SubsetRandomSampler": (
        lambda: check_reproducible(
            ds.ReproducibleShuffleSampler(tud.SubsetRandomSampler(range(5)), 0)
        ),
        ds.ReproducibilityError,
        r"torch's SubsetRandomSampler " + GLOBAL_RNG,
    ),
    "check_reproducible on torch's loader over a WeightedRandomSampler": (
        lambda: check_reproducible(
            tud.DataLoader(range(4), sampler=tud.WeightedRandomSampler([1.0] * 4, 4))
        ),
        ds.ReproducibilityError,
        r"torch's WeightedRandomSampler " + GLOBAL_RNG,
    ),
    "check_reproducible on a SubsetRandomSampler with a generator": (
        lambda: check_reproducible(tud.SubsetRandomSampler(range(5), generator=torch.Generator())),
        ds.ReproducibilityError,
        r"SubsetRandomSampler draws each pass's order from the current state of its generator",
    ),
    "our DataLoader over a SubsetRandomSampler": (
        lambda: DataLoader(range(5), sampler=tud.SubsetRandomSampler(range(5))),
        ds.ReproducibilityError,
        r"torch's SubsetRandomSampler " + GLOBAL_RNG,
    ),
    "np.bool_ as the batch size": (
        lambda: DataLoader(range(4), batch_size=np.bool_(True)),  # type: ignore[arg-type]
        TypeError,
        r"batch_size should be a positive integer value, but got batch_size=np.True_",
    ),
}


@pytest.mark.parametrize("case", list(SWEEP_CASES), ids=list(SWEEP_CASES))
def test_a_sampler_drawing_from_a_global_rng_is_refused_by_the_loader_and_its_check(
    case: str,
) -> None:
    assert_clear_error(*SWEEP_CASES[case])


# -- errors raised by user code mid-epoch ----------------------------------------------


class FailsAt(tud.Dataset[int]):
    def __init__(self, bad: int | None) -> None:
        self.bad = bad

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> int:
        if index == self.bad:
            raise RuntimeError(f"cannot decode record {index}")
        return index


@pytest.mark.parametrize("where", ["__getitem__", "collate_fn"])
def test_a_user_error_mid_epoch_propagates_and_the_last_state_resumes_exactly(where: str) -> None:
    def collate(items: list[int]) -> torch.Tensor:
        if where == "collate_fn" and 7 in items:
            raise RuntimeError("cannot collate record 7")
        return torch.tensor(items)

    bad = 7 if where == "__getitem__" else None
    broken = DataLoader(FailsAt(bad), batch_size=2, shuffle=True, seed=3, collate_fn=collate)
    loader = broken.get_data_loader(repeat=True)
    seen, state = [], None
    with pytest.raises(RuntimeError, match="record 7"):
        for batch in loader:
            seen.append(batch.tolist())
            state = loader.batch_sampler.state_dict()
    assert state is not None
    clean = DataLoader(FailsAt(None), batch_size=2, shuffle=True, seed=3)
    expected = [b.tolist() for b in take(clean.get_data_loader(repeat=True), len(seen) + 6)]
    assert seen == expected[: len(seen)]
    again = clean.get_data_loader(repeat=True)
    again.batch_sampler.load_state_dict(state)
    assert [b.tolist() for b in take(again, 6)] == expected[len(seen) : len(seen) + 6]


@pytest.mark.workers
def test_a_worker_init_fn_error_propagates() -> None:
    def init(worker: int) -> None:
        raise RuntimeError(f"worker {worker} cannot open its database")

    loader = DataLoader(range(4), num_workers=1, worker_init_fn=init).get_data_loader()
    with pytest.raises(RuntimeError, match="cannot open its database"):
        next(iter(loader))
