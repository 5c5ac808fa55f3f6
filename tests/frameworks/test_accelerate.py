"""Accelerate: one-call prepare of both loader forms, an O(1) skip, exact resume via save_state.

examples/accelerate_train.py (docs/recipes/accelerate.md) under torchrun: 64 records, a
global batch of 8, so an epoch is 8 steps. One launch on 2 processes runs
tests/frameworks/accelerate_checks.py (``accelerator.prepare(model, optimizer, loader)``
of an unsharded and of a per-rank loader over one epoch; ``skip_first_batches`` fetches
none of the skipped records, with 0 and 2 workers, and seeks 10**12 batches), then a run of
a per-rank loader with 2 workers that stops at step 3, then its ``save_state`` folder
resumed on 2 processes by an unsharded loader; a second launch resumes it on 1. The
in-process tests cover the same mapping and state for any world size.
"""

from __future__ import annotations

import json
import shutil
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.loader import DataLoader

from .framework_helpers import HERE, per_epoch, torchrun, torchrun_twice

accelerate = pytest.importorskip("accelerate")

RECORDS = 64
STEPS_PER_EPOCH = 8


class Counted:
    """Records that count their fetches (in this process: ``num_workers=0``)."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.fetched: list[int] = []

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        self.fetched.append(index)
        return index


def _prepared(loader: Any, world: int, rank: int, **settings: Any) -> Any:
    from accelerate.data_loader import prepare_data_loader

    return prepare_data_loader(loader, num_processes=world, process_index=rank, **settings)


def _lists(batches: Any, n: int) -> list[list[int]]:
    return [b.tolist() for b in islice(batches, n)]


@settings(max_examples=25, deadline=None)
@given(world=st.integers(1, 3), data=st.data(), skip=st.integers(0, 30))
def test_prepare_gives_each_process_of_a_per_rank_loader_its_own_batches(
    world: int, data: st.DataObject, skip: int
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    loader = DataLoader(range(30), batch_size=2, shuffle=True, seed=3)
    own = _lists(loader.get_data_loader(True, skip, world, rank), 12)
    prepared = _prepared(loader.get_data_loader(True, skip, world, rank), world, rank)
    assert _lists(prepared, 12) == own
    alone = loader.get_data_loader(False, 0, world, rank)
    passes = [_lists(alone, 99) for _ in range(2)]  # reshuffled each pass
    validation = _prepared(loader.get_data_loader(False, 0, world, rank), world, rank)
    assert [_lists(validation, 99) for _ in range(2)] == passes  # nothing padded


@settings(max_examples=25, deadline=None)
@given(world=st.integers(1, 3), data=st.data(), skip=st.integers(0, 30))
def test_prepare_gives_each_process_every_world_th_batch_of_an_unsharded_stream(
    world: int, data: st.DataObject, skip: int
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    loader = DataLoader(range(30), batch_size=2, shuffle=True, seed=3)
    stream = _lists(loader.get_data_loader(True, skip), 12 * world)
    prepared = _prepared(loader.get_data_loader(True, skip), world, rank)
    assert _lists(prepared, 12) == stream[rank::world]


@settings(max_examples=20, deadline=None)
@given(
    world=st.integers(1, 3),
    after=st.integers(1, 3),
    data=st.data(),
    steps=st.integers(1, 20),
    skip=st.integers(0, 5),
    per_rank=st.booleans(),
    resume_per_rank=st.booleans(),
)
def test_a_prepared_loaders_state_counts_the_batches_handed_out_and_resumes_on_any_world(
    world: int,
    after: int,
    data: st.DataObject,
    steps: int,
    skip: int,
    per_rank: bool,
    resume_per_rank: bool,
) -> None:
    rank, again = data.draw(st.integers(0, world - 1)), data.draw(st.integers(0, after - 1))
    loader = DataLoader(range(30), batch_size=2, shuffle=True, seed=3)
    stream = _lists(loader.get_data_loader(True), (steps + skip + 8) * max(world, after))
    saved = loader.get_data_loader(True, 0, *((world, rank) if per_rank else (1, 0)))
    batches = iter(accelerate.skip_first_batches(_prepared(saved, world, rank), skip))
    for _ in range(steps):
        next(batches)  # a batch in hand, and more drawn ahead
    state = saved.state_dict()
    trained = (skip + steps) * world  # global batches of 2 records
    assert state["samples"] == trained * 2
    form = (after, again) if resume_per_rank else (1, 0)
    resumed = loader.get_data_loader(True, 0, *form)
    resumed.load_state_dict(state)
    got = _lists(_prepared(resumed, after, again), 4)
    if resume_per_rank and after > 1:  # this rank's share of each global batch
        expected = _lists(
            loader.get_data_loader(True, 0, after, again, skip_samples=2 * trained), 4
        )
    else:  # every after-th global batch
        expected = stream[trained + again :: after][:4]
    assert got == expected


@pytest.mark.workers
def test_a_new_iteration_of_the_prepared_stream_continues_after_the_batches_handed_out() -> None:
    loader = DataLoader(range(30), batch_size=2, shuffle=True, seed=3, num_workers=2)
    own = _lists(loader.get_data_loader(True, 0, 2, 1), 8)
    prepared = _prepared(loader.get_data_loader(True, 0, 2, 1), 2, 1)
    assert _lists(prepared, 3) + _lists(prepared, 5) == own  # workers had drawn ahead


def test_prepare_refuses_a_loader_split_for_another_process() -> None:
    train = DataLoader(range(16), batch_size=2).get_data_loader(True, 0, 2, 0)
    with pytest.raises(ValueError, match=r"process 1 of num_processes=2.*rank=0 of num_replicas=2"):
        next(iter(_prepared(train, 2, 1)))
    train = DataLoader(range(16), batch_size=2).get_data_loader(True, 0, 3, 1)
    with pytest.raises(ValueError, match=r"built for rank=1 of num_replicas=3; build it with"):
        next(iter(_prepared(train, 2, 1)))


def test_prepare_refuses_dispatch_batches_naming_the_setting() -> None:
    train = DataLoader(range(16), batch_size=2).get_data_loader(True)
    prepared = _prepared(train, 1, 0, dispatch_batches=True, put_on_device=True)
    with pytest.raises(ValueError, match=r"dispatch_batches=True.*dispatch_batches=False"):
        next(iter(prepared))


def test_prepare_on_several_processes_refuses_the_stateful_dataloader_naming_the_fix() -> None:
    pytest.importorskip("torchdata")
    train = DataLoader(range(16), batch_size=2).get_data_loader(True, 0, 2, 1)
    prepared = _prepared(train, 2, 1, use_stateful_dataloader=True)
    with pytest.raises(ValueError, match=r"use_stateful_dataloader=True.*register_for_checkpoint"):
        next(iter(prepared))


def test_prepare_with_split_batches_is_refused_by_accelerate_itself() -> None:
    train = DataLoader(range(16), batch_size=2).get_data_loader(True)
    with pytest.raises(ValueError, match="split_batches"):
        _prepared(train, 2, 0, split_batches=True)


@settings(max_examples=25, deadline=None)
@given(
    world=st.integers(1, 3),
    data=st.data(),
    skip=st.integers(0, 40),
    before=st.integers(0, 5),
)
def test_skip_first_batches_seeks_and_fetches_none_of_the_skipped_records(
    world: int, data: st.DataObject, skip: int, before: int
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    loader = DataLoader(range(48), batch_size=2, shuffle=True, seed=3)
    plain = [b.tolist() for b in islice(loader.get_data_loader(True, 0, world, rank), 60)]
    counted = Counted(48)
    train = DataLoader(counted, batch_size=2, shuffle=True, seed=3).get_data_loader(
        True, 0, world, rank
    )
    batches = iter(train)
    got = [next(batches).tolist() for _ in range(before)]  # where the loader stands
    counted.fetched.clear()
    skipped = accelerate.skip_first_batches(train, skip)
    got += [b.tolist() for b in islice(skipped, 5)]
    assert got == plain[:before] + plain[before + skip : before + skip + 5]
    assert sorted(counted.fetched) == sorted(i for b in got[before:] for i in b)
    assert skipped.batch_sampler.skip_batches == 0  # taken over: nothing left to replay


def test_skip_first_batches_past_any_replay_lands_where_get_data_loader_skip_does() -> None:
    loader = DataLoader(range(40), batch_size=4, shuffle=True, seed=2)
    far = 10**15
    skipped = accelerate.skip_first_batches(loader.get_data_loader(True, 0, 2, 1), far)
    assert (
        next(iter(skipped)).tolist() == next(iter(loader.get_data_loader(True, far, 2, 1))).tolist()
    )


def test_a_second_pass_of_the_skipped_loader_continues_the_stream() -> None:
    loader = DataLoader(range(40), batch_size=4, shuffle=True, seed=2)
    plain = [b.tolist() for b in islice(loader.get_data_loader(repeat=True), 20)]
    skipped = accelerate.skip_first_batches(loader.get_data_loader(repeat=True), 3)
    first = [b.tolist() for b in islice(skipped, 4)]
    assert first + [b.tolist() for b in islice(skipped, 4)] == plain[3:11]


def test_skip_first_batches_over_a_validation_loader_keeps_accelerates_replay() -> None:
    loader = DataLoader(range(12), batch_size=2, shuffle=True, seed=2)
    skipped = accelerate.skip_first_batches(loader.get_data_loader(), 2)
    assert [b.tolist() for b in skipped] == [b.tolist() for b in loader.get_data_loader()][2:]
    assert skipped.batch_sampler.skip_batches == 2


def _stream_steps(batch_size: int, world: int, rank: int, steps: range) -> list[list[int]]:
    """What ``rank`` of ``world`` trains at ``steps`` of the example's uninterrupted run."""
    data = DataLoader(range(RECORDS), batch_size=batch_size, shuffle=True, seed=1)
    stream = [b.tolist() for b in islice(data.get_data_loader(repeat=True), steps.stop * world)]
    return [stream[step * world + rank] for step in steps]


@pytest.mark.distributed
@pytest.mark.frameworks
def test_accelerate_prepares_in_one_call_and_resumes_mid_epoch_from_save_state_on_1_and_2(
    tmp_path: Path,
) -> None:
    first, on_2, on_1 = (tmp_path / name for name in ("first", "resumed-on-2", "resumed-on-1"))

    def resume_args(run: Path, batch_size: int) -> list[str]:
        args = ["--out", str(run), "--max-steps", "16", "--batch-size", str(batch_size)]
        return [*args, "--resume", str(run / "checkpoints" / "step-3")]

    # A per-rank loader with 2 workers stops at step 3 of 8; an unsharded one resumes it.
    torchrun_twice(
        "accelerate_train.py",
        2,
        (first, on_2),
        ["--out", str(first), "--max-steps", "3", "--num-workers", "2", "--per-rank"],
        resume_args(on_2, 4),
        tmp_path / "on-2.log",
        checks=HERE / "accelerate_checks.py",
    )
    for form in ("unsharded", "per-rank"):
        seen: list[int] = []
        for rank in (0, 1):
            report = json.loads((first / f"accelerate-checks-rank{rank}.json").read_text())
            seen += [i for batch in report[f"epoch-{form}"] for i in batch]
        assert sorted(seen) == list(range(RECORDS)), form  # one epoch: every record once
    assert sum(per_epoch(first, STEPS_PER_EPOCH)[0].values()) == 3 * 8
    shutil.copytree(first, on_1)
    torchrun("accelerate_train.py", 1, resume_args(on_1, 8), tmp_path / "on-1.log")
    for run in (on_1, on_2):
        counts = per_epoch(run, STEPS_PER_EPOCH)
        assert sorted(counts) == [0, 1], run.name
        for epoch, seen_once in counts.items():
            assert seen_once == dict.fromkeys(range(RECORDS), 1), (run.name, epoch)
    # Exactly the uninterrupted run's batches, step by step, after the resume.
    data = DataLoader(range(RECORDS), batch_size=4, shuffle=True, seed=1)
    for rank in (0, 1):
        trained = _rows(first, rank)
        own = [b.tolist() for b in islice(data.get_data_loader(True, 0, 2, rank), 3)]
        assert trained == dict(enumerate(own)), rank
        assert _rows(on_2, rank) == {
            **trained,
            **dict(zip(range(3, 16), _stream_steps(4, 2, rank, range(3, 16)), strict=True)),
        }
    resumed = _rows(on_1, 0)
    assert {step: resumed[step] for step in range(3, 16)} == dict(
        zip(range(3, 16), _stream_steps(8, 1, 0, range(3, 16)), strict=True)
    )


def _rows(run: Path, rank: int) -> dict[int, list[int]]:
    lines = (run / f"records-rank{rank}.jsonl").read_text().splitlines()
    return {row["step"]: row["indices"] for row in map(json.loads, lines)}
