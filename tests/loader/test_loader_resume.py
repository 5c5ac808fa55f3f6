from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from loader_helpers import Noisy, indices, take

from detsamplers.loader import DataLoader

N, B, PASSES = 7, 2, 2


def make(num_workers: int = 0, length: int = N, **kwargs: object) -> DataLoader:
    options: dict[str, object] = {"batch_size": B, "shuffle": True, "seed": 11}
    options.update(kwargs)
    return DataLoader(Noisy(length), num_workers=num_workers, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_resuming_at_every_skip_repeats_the_uninterrupted_batches_and_draws(world: int) -> None:
    loader = make()
    for rank in range(world):
        steps = PASSES * -(-N // (B * world)) + 1
        reference = take(loader.get_data_loader(True, 0, world, rank), steps + 2)
        for skip in range(steps):
            resumed = take(loader.get_data_loader(True, skip, world, rank), 2)
            assert resumed == reference[skip : skip + 2]


@pytest.mark.workers
@pytest.mark.parametrize("world", [1, 2])
def test_resuming_with_two_workers_at_every_skip_repeats_the_uninterrupted_run(world: int) -> None:
    reference_loader = make()
    loader = make(num_workers=2)
    for rank in range(world):
        steps = -(-N // (B * world)) + 1
        reference = take(reference_loader.get_data_loader(True, 0, world, rank), steps + 3)
        for skip in range(steps):
            resumed = take(loader.get_data_loader(True, skip, world, rank), 3)
            assert resumed == reference[skip : skip + 3]


@pytest.mark.workers
@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker")
def test_batches_and_draws_do_not_depend_on_num_workers() -> None:
    training = [take(make(num_workers=w).get_data_loader(repeat=True), 9) for w in (0, 1, 2, 3)]
    validation = [take(make(num_workers=w, shuffle=False), 4) for w in (0, 2)]
    assert all(run == training[0] for run in training)
    assert validation[0] == validation[1]
    assert indices(validation[0]) == [[0, 1], [2, 3], [4, 5], [6]]


def test_the_order_and_draws_do_not_depend_on_the_global_rng() -> None:
    runs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        np.random.seed(global_seed)
        random.seed(global_seed)
        runs.append(take(make().get_data_loader(repeat=True), 6))
    assert runs[0] == runs[1]


def _draws_between_batches(loader: torch.utils.data.DataLoader, steps: int) -> list[list[float]]:
    """What a training step would draw from the global RNGs after each of ``steps`` batches."""
    out = []
    for _, _batch in zip(range(steps), loader, strict=False):
        out.append([torch.rand(()).item(), float(np.random.rand()), random.random()])
    return out


def test_in_the_main_process_code_between_batches_draws_from_the_batch_stream() -> None:
    # NOTE [ per-batch seeding ]: the process that fetches a batch is left in its stream,
    # so a step's draws after batch b depend on (seed, b) only: the same after a resume
    # at any skip, whatever the global RNGs held before.
    runs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed), np.random.seed(global_seed), random.seed(global_seed)
        runs.append(_draws_between_batches(make().get_data_loader(repeat=True), 10))
    assert runs[0] == runs[1]
    assert len({tuple(step) for step in runs[0]}) == 10  # each batch its own stream
    for skip in range(8):
        torch.manual_seed(99)
        resumed = _draws_between_batches(make().get_data_loader(repeat=True, skip=skip), 2)
        assert resumed == runs[0][skip : skip + 2]


def test_another_seed_gives_other_draws_between_batches() -> None:
    ours = _draws_between_batches(make().get_data_loader(repeat=True), 3)
    theirs = _draws_between_batches(make(seed=12).get_data_loader(repeat=True), 3)
    assert all(a != b for a, b in zip(ours, theirs, strict=True))


@settings(max_examples=25, deadline=None)
@given(
    length=st.integers(1, 9),
    batch=st.integers(1, 4),
    skip=st.integers(0, 12),
    world=st.integers(1, 3),
    global_seed=st.integers(0, 2**31),
)
def test_draws_between_batches_after_a_resume_are_the_uninterrupted_runs(
    length: int, batch: int, skip: int, world: int, global_seed: int
) -> None:
    loader = make(length=length, batch_size=batch)
    rank = skip % world
    reference = _draws_between_batches(loader.get_data_loader(True, 0, world, rank), skip + 2)
    torch.manual_seed(global_seed), np.random.seed(global_seed), random.seed(global_seed)
    resumed = _draws_between_batches(loader.get_data_loader(True, skip, world, rank), 2)
    assert resumed == reference[skip:]


def test_a_loaded_state_continues_the_uninterrupted_run() -> None:
    loader = make()
    reference = take(loader.get_data_loader(repeat=True), 12)
    for consumed in range(9):
        first = loader.get_data_loader(repeat=True)
        assert take(first, consumed) == reference[:consumed]
        state = first.batch_sampler.state_dict()  # type: ignore[union-attr]
        second = loader.get_data_loader(repeat=True, skip=5)
        second.batch_sampler.load_state_dict(state)  # type: ignore[union-attr]
        assert take(second, 3) == reference[consumed : consumed + 3]


def test_a_validation_pass_shards_unevenly_without_padding() -> None:
    loader = make(shuffle=False, length=5)
    per_rank = [indices(take(loader.get_data_loader(False, 0, 3, r), 9)) for r in range(3)]
    assert per_rank == [[[0, 3]], [[1, 4]], [[2]]]


@settings(max_examples=25, deadline=None)
@given(
    length=st.integers(1, 12),
    per_rank=st.integers(1, 3),
    world=st.sampled_from([1, 2, 4]),
    step=st.integers(0, 6),
)
def test_global_batches_are_the_same_for_any_world_size_with_the_same_global_batch(
    length: int, per_rank: int, world: int, step: int
) -> None:
    global_batch = per_rank * world
    single = DataLoader(range(length), batch_size=global_batch, shuffle=True, seed=4)
    expected = next(iter(single.get_data_loader(repeat=True, skip=step))).tolist()
    sharded = DataLoader(range(length), batch_size=per_rank, shuffle=True, seed=4)
    got = []
    for rank in range(world):
        got += next(iter(sharded.get_data_loader(True, step, world, rank))).tolist()
    assert sorted(got) == sorted(expected)


@settings(max_examples=25, deadline=None)
@given(length=st.integers(1, 9), batch=st.integers(1, 4), skip=st.integers(0, 12))
def test_skipping_k_batches_equals_dropping_the_first_k(length: int, batch: int, skip: int) -> None:
    loader = DataLoader(Noisy(length), batch_size=batch, shuffle=True, seed=2)
    reference = take(loader.get_data_loader(repeat=True), skip + 2)
    assert take(loader.get_data_loader(repeat=True, skip=skip), 2) == reference[skip:]
