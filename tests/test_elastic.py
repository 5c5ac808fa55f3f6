"""The elastic law and exactly-once coverage, with ranks simulated in one process."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

import detsamplers as ds
from tests.helpers import take


def global_batches(
    n: int, seed: int, world: int, size: int, skip: int, count: int
) -> list[list[int]]:
    """Global batch t in stream order: position (t B + i) W + r is rank r's record i of batch t."""
    ranks = [
        take(ds.make_batch_sampler(range(n), "training", seed, world, rank, size, skip), count)
        for rank in range(world)
    ]
    return [[ranks[r][t][i] for i in range(size) for r in range(world)] for t in range(count)]


@given(
    n=st.integers(1, 60),
    seed=st.integers(0, 2**32),
    global_batch=st.sampled_from([2, 4, 6, 8, 12, 24]),
    skip=st.integers(0, 20),
    data=st.data(),
)
def test_global_batches_hold_the_same_records_for_every_world_size(
    n: int, seed: int, global_batch: int, skip: int, data: st.DataObject
) -> None:
    divisors = [w for w in range(1, global_batch + 1) if global_batch % w == 0]
    a, b = data.draw(st.sampled_from(divisors)), data.draw(st.sampled_from(divisors))
    first = global_batches(n, seed, a, global_batch // a, skip, 6)
    second = global_batches(n, seed, b, global_batch // b, skip, 6)
    assert [sorted(x) for x in first] == [sorted(x) for x in second]


@given(
    n=st.integers(1, 60),
    seed=st.integers(0, 2**32),
    world=st.integers(1, 5),
    size=st.integers(1, 6),
)
def test_every_record_appears_exactly_once_per_epoch_of_the_global_stream(
    n: int, seed: int, world: int, size: int
) -> None:
    batches = global_batches(n, seed, world, size, 0, -(-3 * n // (world * size)) + 1)
    stream = [x for batch in batches for x in batch]
    for epoch in range(3):
        assert Counter(stream[epoch * n : (epoch + 1) * n]) == Counter(range(n))


@given(
    n=st.integers(1, 40),
    seed=st.integers(0, 2**32),
    trained=st.integers(0, 30),
    data=st.data(),
)
def test_resuming_on_another_world_size_loses_and_duplicates_nothing(
    n: int, seed: int, trained: int, data: st.DataObject
) -> None:
    before, after = data.draw(st.sampled_from([1, 2, 4])), data.draw(st.sampled_from([1, 2, 4]))
    uninterrupted = global_batches(n, seed, before, 4 // before, 0, trained + 5)
    head = uninterrupted[:trained]
    tail = global_batches(n, seed, after, 4 // after, trained, 5)
    assert [sorted(x) for x in head + tail] == [sorted(x) for x in uninterrupted]


@given(
    n=st.integers(1, 60),
    seed=st.integers(0, 2**32),
    world=st.integers(1, 5),
    data=st.data(),
    mode=st.sampled_from(["training", "validation"]),
    size=st.integers(1, 7),
)
def test_world_size_names_the_same_world_size_as_determineds_num_workers(
    n: int, seed: int, world: int, data: st.DataObject, mode: str, size: int
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    skip = data.draw(st.integers(0, 20)) if mode == "training" else 0
    by_name = ds.make_batch_sampler(
        range(n), mode, shuffle_seed=seed, world_size=world, rank=rank, batch_size=size, skip=skip
    )
    positional = ds.make_batch_sampler(range(n), mode, seed, world, rank, size, skip)
    assert take(by_name, 12) == take(positional, 12)
    if mode == "training":
        assert by_name.state_dict() == positional.state_dict()
