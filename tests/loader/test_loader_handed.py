"""The loader's state counts the batches handed to the caller (NOTE [ handed batches ]).

A resume from ``loader.state_dict()`` (or its batch sampler's, which agrees) continues the
stream of an uninterrupted run, whatever the workers, prefetching and persistent workers of
either run, and a batch whose fetch raised is fetched again. The dataset the user sees,
``loader.dataset`` and ``get_worker_info().dataset``, is the user's own (NOTE [ seeded
fetch ]).
"""

from __future__ import annotations

import json
import warnings
from itertools import islice
from typing import Any

import pytest
import torch
import torch.utils.data as tud
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loader_helpers import Noisy

from detsamplers.loader import DataLoader
from detsamplers.loader._lean import LeanDataLoader

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchdata.stateful_dataloader import StatefulDataLoader

RECORDS = 60
BATCH = 4


class Failing(Noisy):
    """:class:`Noisy` whose ``__getitem__`` raises for record ``fail`` (while armed)."""

    def __init__(self, length: int, fail: int | None) -> None:
        super().__init__(length)
        self.fail = fail

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.fail:
            raise RuntimeError(f"record {index} is unreadable")
        return super().__getitem__(index)


class Handle(tud.Dataset[tuple[int, str | None, bool]]):
    """A dataset whose worker_init_fn opens a per-worker handle on ``info.dataset``."""

    def __init__(self) -> None:
        self.handle: str | None = None

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> tuple[int, str | None, bool]:
        info = tud.get_worker_info()
        return index, self.handle, info is not None and info.dataset is self


def open_handle(worker_id: int) -> None:
    info = tud.get_worker_info()
    assert info is not None
    info.dataset.handle = f"handle-{worker_id}"


def as_list(batch: Any) -> Any:
    return batch


def build(dataset: Any, workers: int, prefetch: int | None = None, persistent: bool = False) -> Any:
    options: dict[str, Any] = {}
    if workers:
        options = {"prefetch_factor": prefetch, "persistent_workers": persistent}
    return DataLoader(
        dataset, batch_size=BATCH, shuffle=True, seed=11, num_workers=workers, **options
    )


def straight(count: int) -> list[list[list[float]]]:
    """The first ``count`` batches of an uninterrupted in-process run."""
    train = build(Noisy(RECORDS), 0).get_data_loader(repeat=True)
    return [batch.tolist() for batch in islice(train, count)]


def save(train: Any, route: str) -> dict[str, Any]:
    state = train.state_dict() if route == "loader" else train.batch_sampler.state_dict()
    return json.loads(json.dumps(state))  # what a checkpoint file holds


def load(train: Any, state: dict[str, Any], route: str) -> None:
    if route == "loader":
        train.load_state_dict(state)
    else:
        train.batch_sampler.load_state_dict(state)


@pytest.mark.workers
def test_the_issue_repro_saves_the_batches_trained_not_the_ones_prefetched() -> None:
    loader = DataLoader(range(200), batch_size=4, shuffle=True, seed=7, num_workers=2)
    batches = loader.get_data_loader(repeat=True)
    trained = list(islice(batches, 12))
    state = batches.batch_sampler.state_dict()
    assert (state["position"], state["samples"]) == (12, 48)
    assert batches.state_dict() == state
    resumed = loader.get_data_loader(repeat=True)
    resumed.load_state_dict(state)
    again = DataLoader(range(200), batch_size=4, shuffle=True, seed=7).get_data_loader(repeat=True)
    expected = [batch.tolist() for batch in islice(again, 20)]
    got = [batch.tolist() for batch in trained + list(islice(resumed, 8))]
    assert got == expected


worker_runs = st.tuples(
    st.integers(0, 3),  # num_workers
    st.integers(1, 4),  # prefetch_factor
    st.booleans(),  # persistent_workers
)


def _resumed_stream(
    paused: tuple[int, int, bool], resumed: tuple[int, int, bool], pause: int, route: str
) -> list[list[list[float]]]:
    workers, prefetch, persistent = paused
    train = build(Noisy(RECORDS), workers, prefetch, persistent).get_data_loader(repeat=True)
    head = [batch.tolist() for batch in islice(train, pause)]
    state = save(train, route)
    assert state["position"] == pause and state["samples"] == pause * BATCH
    workers, prefetch, persistent = resumed
    again = build(Noisy(RECORDS), workers, prefetch, persistent).get_data_loader(repeat=True)
    load(again, state, route)
    return head + [batch.tolist() for batch in islice(again, 6)]


@pytest.mark.workers
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worker_runs, worker_runs, st.integers(0, 25), st.sampled_from(["loader", "sampler"]))
def test_a_pause_and_resume_with_any_workers_continues_the_straight_stream(
    paused: tuple[int, int, bool], resumed: tuple[int, int, bool], pause: int, route: str
) -> None:
    assert _resumed_stream(paused, resumed, pause, route) == straight(pause + 6)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.sampled_from(["loader", "sampler"]))
def test_a_pause_and_resume_in_process_continues_the_straight_stream(
    pause: int, route: str
) -> None:
    no_workers = (0, 1, False)
    assert _resumed_stream(no_workers, no_workers, pause, route) == straight(pause + 6)


def _failing_run(
    workers: int, prefetch: int, fail_at: int, go_on: int, route: str
) -> tuple[list[list[list[float]]], dict[str, Any]]:
    """Batches handed out before and after a fetch that raised at batch ``fail_at``."""
    order = [int(row[0]) for batch in straight(fail_at + 1) for row in batch]
    dataset = Failing(RECORDS, fail=order[fail_at * BATCH + 1])
    train = build(dataset, workers, prefetch).get_data_loader(repeat=True)
    batches = iter(train)
    head = [next(batches).tolist() for _ in range(fail_at)]
    try:
        next(batches)
    except RuntimeError as error:
        assert "is unreadable" in str(error)
        # torch's re-raise keeps the error in a frame of its traceback, a cycle that would
        # keep the iterator and its workers until the garbage collector's slow shutdown.
        error.__traceback__ = None
    else:
        pytest.fail("the fetch of the unreadable record did not raise")
    head += [next(batches).tolist() for _ in range(go_on)]  # the caller carries on
    state = save(train, route)
    del batches  # the workers shut down now
    return head, state


@pytest.mark.workers
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 3),
    st.integers(1, 4),
    st.integers(0, 8),
    st.integers(0, 3),
    st.sampled_from(["loader", "sampler"]),
)
def test_a_fetch_that_raised_is_not_counted_and_a_resume_fetches_it_again(
    workers: int, prefetch: int, fail_at: int, go_on: int, route: str
) -> None:
    head, state = _failing_run(workers, prefetch, fail_at, go_on, route)
    expected = straight(fail_at + go_on + 7)
    if go_on == 0:  # stopped at the failure: the resume fetches the batch again
        assert state["position"] == fail_at
        resumed_from = fail_at
    else:  # the live run went past it: so does the state
        assert state["position"] == fail_at + 1 + go_on
        del expected[fail_at]
        resumed_from = fail_at + go_on
    again = build(Noisy(RECORDS), 1 if workers == 0 else 0).get_data_loader(repeat=True)
    load(again, state, route)
    got = head + [batch.tolist() for batch in islice(again, 6)]
    assert got == expected[: resumed_from + 6]


def test_the_in_process_failure_law_holds_for_every_batch() -> None:
    for fail_at in range(6):
        head, state = _failing_run(0, 1, fail_at, 0, "loader")
        assert state["position"] == fail_at and head == straight(fail_at)


@pytest.mark.workers
def test_two_iters_over_an_endless_stream_continue_after_the_last_batch_handed_out() -> None:
    for workers, persistent in ((0, False), (2, False), (2, True)):
        train = build(Noisy(RECORDS), workers, 3, persistent).get_data_loader(repeat=True)
        first = [b.tolist() for b in islice(train, 3)]  # break: workers had drawn more
        second = [b.tolist() for b in islice(train, 4)]
        assert first + second == straight(7)
        assert train.state_dict()["position"] == 7


@pytest.mark.workers
def test_a_break_mid_pass_then_iter_starts_the_next_pass_as_torch_does() -> None:
    for workers in (0, 2):
        passes = build(Noisy(10), workers, 2, persistent=workers > 0).get_data_loader()
        torch_like = [len(list(islice(passes, 1))), len(list(passes)), len(list(passes))]
        assert torch_like == [1, 3, 3]  # a new iter() is a new pass, each of 3 batches
        state = passes.state_dict()
        assert state["position"] == 9  # three passes of three batches, all handed out


@pytest.mark.workers
def test_a_state_saved_mid_pass_resumes_that_pass_on_the_next_iter() -> None:
    for workers in (0, 2):
        passes = build(Noisy(10), workers, 2).get_data_loader()
        batches = iter(passes)
        first = next(batches).tolist()
        state = passes.state_dict()
        rest = [b.tolist() for b in batches]
        again = build(Noisy(10), 0).get_data_loader()
        again.load_state_dict(json.loads(json.dumps(state)))
        assert state["position"] == 1 and [b.tolist() for b in again] == rest and first


@pytest.mark.workers
def test_a_loaded_state_applies_to_the_next_iter_with_persistent_workers() -> None:
    train = build(Noisy(RECORDS), 2, 2, persistent=True).get_data_loader(repeat=True)
    head = [b.tolist() for b in islice(train, 5)]
    state = train.state_dict()
    list(islice(train, 3))  # trained on, then rolled back to the checkpoint
    train.load_state_dict(state)
    assert head + [b.tolist() for b in islice(train, 4)] == straight(9)


@pytest.mark.workers
def test_the_state_is_the_same_small_json_dict_as_the_batch_samplers() -> None:
    train = build(Noisy(RECORDS), 2, 4).get_data_loader(repeat=True)
    list(islice(train, 3))
    state = train.state_dict()
    assert state == train.batch_sampler.state_dict() == json.loads(json.dumps(state))
    keys = {"version", "position", "fingerprint", "chain", "samples", "loader", "digest"}
    assert set(state) == keys and len(json.dumps(state)) < 2000


class OutOfOrder(LeanDataLoader):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, in_order=False, **kwargs)


@pytest.mark.workers
def test_out_of_order_delivery_refuses_to_save_a_state_that_would_not_be_exact() -> None:
    train = build(Noisy(RECORDS), 2, 2).get_data_loader(repeat=True, loader_class=OutOfOrder)
    list(islice(train, 2))
    with pytest.raises(ValueError, match=r"in_order=False hands batches out of order.*"):
        train.state_dict()
    with pytest.raises(ValueError, match=r"loader\.state_dict\(\)"):
        train.batch_sampler.state_dict()


def test_a_loader_over_another_batch_sampler_has_no_state() -> None:
    with pytest.raises(TypeError, match=r"needs the batch sampler of a detsamplers\.loader"):
        LeanDataLoader(range(4), batch_size=2).state_dict()


@pytest.mark.workers
def test_the_stateful_dataloader_class_stays_exact_with_workers() -> None:
    train = build(Noisy(RECORDS), 2, 3).get_data_loader(
        repeat=True, loader_class=StatefulDataLoader
    )
    batches = iter(train)
    head = [next(batches).tolist() for _ in range(5)]
    state = train.state_dict()
    again = build(Noisy(RECORDS), 2, 3).get_data_loader(
        repeat=True, loader_class=StatefulDataLoader
    )
    again.load_state_dict(state)
    assert head + [b.tolist() for b in islice(again, 3)] == straight(8)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("loader_class", [None, StatefulDataLoader])
def test_loader_dataset_and_worker_info_dataset_are_the_users_object(
    workers: int, loader_class: Any
) -> None:
    dataset = Handle()
    options: dict[str, Any] = {"worker_init_fn": open_handle} if workers else {}
    loader = DataLoader(dataset, batch_size=4, num_workers=workers, collate_fn=as_list, **options)
    train = loader.get_data_loader(repeat=True, loader_class=loader_class)
    assert train.dataset is dataset
    items = [item for batch in islice(train, 4) for item in batch]
    if workers:  # the handle the worker_init_fn opened is the one the records see
        assert all(same and handle and handle.startswith("handle-") for _, handle, same in items)
    else:
        assert all(handle is None and not same for _, handle, same in items)


@pytest.mark.workers
def test_a_loader_rebuilt_from_its_arguments_keeps_the_seeded_fetch() -> None:
    for workers in (0, 2):
        train = build(Noisy(RECORDS), workers, 2).get_data_loader(repeat=True)
        rebuilt = type(train)(
            train.dataset,
            batch_sampler=train.batch_sampler,
            num_workers=train.num_workers,
            collate_fn=train.collate_fn,
        )
        assert [b.tolist() for b in islice(rebuilt, 3)] == straight(3)


@pytest.mark.workers
def test_record_seeding_is_unchanged_through_the_fetcher() -> None:
    def run(workers: int, batch: int) -> dict[int, list[float]]:
        loader = DataLoader(
            Noisy(24), batch_size=batch, shuffle=True, seed=5, num_workers=workers, seeding="record"
        )
        rows = [row for b in islice(loader.get_data_loader(repeat=True), 24 // batch) for row in b]
        return {int(row[0]): row[1:4].tolist() for row in rows}

    assert run(0, 4) == run(2, 3) == run(0, 6)


@pytest.mark.workers
def test_spawned_workers_fetch_seeded_batches_and_count_them() -> None:
    loader = DataLoader(
        Noisy(RECORDS),
        batch_size=BATCH,
        shuffle=True,
        seed=11,
        num_workers=1,  # a spawned worker imports torch afresh: seconds each
        multiprocessing_context="spawn",
    )
    train = loader.get_data_loader(repeat=True)
    assert [b.tolist() for b in islice(train, 5)] == straight(5)
    assert train.state_dict()["position"] == 5


def test_the_loader_refuses_a_state_that_is_not_its_own_with_the_batch_samplers_checks() -> None:
    train = build(Noisy(RECORDS), 0).get_data_loader(repeat=True)
    with pytest.raises(TypeError, match=r"state should be a dict from LoaderBatchSampler"):
        train.load_state_dict("position 3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"it lacks loader, digest"):
        train.load_state_dict({"position": 3})
