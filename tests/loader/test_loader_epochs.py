"""Epoch-aware datasets: the loader hands each record the pass of its sample position."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import ConcatDataset, Subset

from detsamplers import MixSampler
from detsamplers.loader import DataLoader


class Pairs:
    """A dataset whose record is the ``(epoch, index)`` pair it was read at."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[int, int]:
        return (-1, index)  # never called by a training stream

    def getitems_in_epochs(self, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
        return [(int(e), int(i)) for e, i in pairs]


def records(loader: Any, count: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for batch in loader:
        out.extend(batch)
        if len(out) >= count:
            return out[:count]
    raise AssertionError("the stream ended")


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 9), batch=st.integers(1, 4), world=st.integers(1, 4),
       skip=st.integers(0, 30), seeding=st.sampled_from(["batch", "record"]))  # fmt: skip
def test_each_record_reads_the_pass_of_its_sample_on_any_rank_and_resume_point(
    n: int, batch: int, world: int, skip: int, seeding: str
) -> None:
    loader = DataLoader(Pairs(n), batch_size=batch, shuffle=True, seed=5, seeding=seeding,
                        collate_fn=lambda b: b)  # fmt: skip
    single = records(loader.get_data_loader(repeat=True), skip + 3 * n + world * batch)
    # The pass of sample s is s // n, and each pass reads every index once.
    assert [e for e, _ in single] == [s // n for s in range(len(single))]
    for epoch in range(3):
        assert sorted(i for _, i in single[epoch * n : (epoch + 1) * n]) == list(range(n))
    # Rank r of W resumed at sample ``skip`` reads samples skip + r, skip + r + W, ...
    for rank in range(world):
        got = records(
            loader.get_data_loader(repeat=True, num_replicas=world, rank=rank, skip_samples=skip),
            batch,
        )
        assert got == single[skip + rank :: world][:batch]


def test_a_mixture_reads_each_component_at_its_own_pass() -> None:
    parts = [Pairs(3), Pairs(5)]
    mix = MixSampler.from_datasets(parts, weights=[0.5, 0.5], seed=1)

    class Routed(ConcatDataset[Any]):
        def getitems_in_epochs(self, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
            return [(int(e), int(i)) for e, i in pairs]

    loader = DataLoader(Routed(parts), sampler=mix, batch_size=4, seed=1, collate_fn=lambda b: b)
    got = records(loader.get_data_loader(repeat=True), 40)
    for c, (low, n) in enumerate([(0, 3), (3, 5)]):
        mine = [(e, i - low) for e, i in got if low <= i < low + n]
        assert [e for e, _ in mine] == [q // n for q in range(len(mine))], c
        for epoch in range(len(mine) // n):
            assert sorted(i for _, i in mine[epoch * n : (epoch + 1) * n]) == list(range(n))


def test_a_validation_pass_reads_epoch_0_through_getitem() -> None:
    loader = DataLoader(Pairs(4), batch_size=2, collate_fn=lambda b: b)
    assert [r for b in loader.get_data_loader() for r in b] == [(-1, 0), (-1, 1), (-1, 2), (-1, 3)]


def test_a_data_config_that_is_not_a_dict_is_refused_naming_the_hook() -> None:
    class Odd(Pairs):
        def data_config(self) -> list[int]:
            return [1]

    with pytest.raises(TypeError, match=r"dataset.data_config\(\) should return a dict .* list"):
        DataLoader(Odd(3), batch_size=1).get_data_loader(repeat=True)


def test_a_subset_or_concat_dataset_hiding_the_epochs_is_refused() -> None:
    with pytest.raises(ValueError, match=r"got a Subset of a Pairs, which reads epochs"):
        DataLoader(Subset(Pairs(5), [0, 2]), batch_size=1)
    with pytest.raises(ValueError, match=r"ConcatDataset whose datasets\[1\] \(Pairs\)"):
        DataLoader(ConcatDataset([range(3), Pairs(2)]), batch_size=1)
    indices = DataLoader(Pairs(5), sampler=[0, 2], batch_size=2, collate_fn=lambda b: b)
    assert records(indices.get_data_loader(repeat=True), 4) == [(0, 0), (0, 2), (1, 0), (1, 2)]
