"""Resume laws: skip=k is the tail of skip=0, and a saved state continues exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

import detsamplers as ds
from tests.helpers import ForeignSampler, take


def training_chain(
    n: int, seed: int, world: int, rank: int, size: int, skip: int, source: Any = None
) -> Any:
    base = range(n) if source is None else source
    return ds.make_batch_sampler(base, "training", seed, world, rank, size, skip)


@given(
    n=st.integers(1, 25),
    seed=st.integers(0, 2**31),
    world=st.integers(1, 4),
    size=st.integers(1, 5),
    data=st.data(),
)
def test_skip_k_equals_the_tail_of_skip_zero_for_every_k(
    n: int, seed: int, world: int, size: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    horizon = 3 * n + 6
    full = take(training_chain(n, seed, world, rank, size, 0), horizon + 4)
    for k in range(horizon):
        assert take(training_chain(n, seed, world, rank, size, k), 4) == full[k : k + 4]


@given(n=st.integers(1, 25), seed=st.integers(0, 2**31), skip=st.integers(0, 80))
def test_record_skip_equals_the_tail_on_the_record_stream(n: int, seed: int, skip: int) -> None:
    def chain(k: int) -> Any:
        return ds.SkipSampler(ds.RepeatSampler(ds.ReproducibleShuffleSampler(range(n), seed)), k)

    assert take(chain(skip), 10) == take(chain(0), skip + 10)[skip:]


@pytest.mark.parametrize("foreign", [False, True], ids=["addressable", "foreign"])
@given(
    n=st.integers(1, 20),
    world=st.integers(1, 3),
    size=st.integers(1, 4),
    consumed=st.integers(0, 40),
    data=st.data(),
)
def test_a_saved_state_continues_exactly_where_the_iterator_stopped(
    foreign: bool, n: int, world: int, size: int, consumed: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    skip = data.draw(st.integers(0, 5))

    def build() -> Any:
        source = ForeignSampler(range(n)) if foreign else None
        return training_chain(n, 11, world, rank, size, skip, source)

    reference = take(build(), consumed + 6)
    chain = build()
    iterator = iter(chain)
    seen = [next(iterator) for _ in range(consumed)]
    state = json.loads(json.dumps(chain.state_dict()))
    assert state["position"] == skip + consumed
    restored = build()
    restored.load_state_dict(state)
    assert seen + take(restored, 6) == reference


@settings(max_examples=40)
@given(n=st.integers(1, 30), world=st.integers(1, 3), data=st.data())
def test_a_finite_chain_resumes_mid_pass_and_then_starts_the_next_pass(
    n: int, world: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))

    def build() -> Any:
        return ds.DistributedSampler(ds.ReproducibleShuffleSampler(range(n), 4), world, rank)

    uninterrupted = build()
    flat = [x for _ in range(6) for x in uninterrupted]
    length = len(flat) // 6
    if length == 0:
        return
    consumed = data.draw(st.integers(0, 4 * length))
    chain = build()
    seen: list[int] = []
    while len(seen) < consumed:
        for x in chain:
            seen.append(x)
            if len(seen) == consumed:
                break
    assert seen == flat[:consumed]
    restored = build()
    restored.load_state_dict(chain.state_dict())
    # Mid-pass, the next iteration finishes the pass; at a boundary, it is the next pass.
    end = -(-consumed // length) * length if consumed % length else consumed + length
    assert list(restored) == flat[consumed:end]
    assert list(restored) == flat[end : end + length]


def test_iter_has_no_side_effect_until_the_iterator_runs() -> None:
    shuffle = ds.ReproducibleShuffleSampler(range(30), 2)
    reference = ds.ReproducibleShuffleSampler(range(30), 2)
    for _ in range(3):
        iter(shuffle)  # created, never started: StatefulDataLoader does this
    assert list(shuffle) == list(reference)


def test_state_is_small_json_and_names_its_chain() -> None:
    chain = training_chain(100, 3, 2, 1, 8, 5)
    state = chain.state_dict()
    assert set(state) == {"version", "position", "fingerprint", "chain", "samples"}
    assert state["samples"] == 5 * 2 * 8  # skip 5 global batches of 2 ranks x 8
    assert len(json.dumps(state)) < 400
    assert [link.get("stage", "source") for link in state["chain"]] == [
        "source",
        "shuffle",
        "repeat",
        "shard",
        "batch",
        "skip",
    ]
    assert state is not chain.state_dict()


@pytest.mark.parametrize(
    ("other", "message"),
    [
        (dict(seed=4), r"shuffle seed is 3 in the state but 4 here"),
        (dict(n=101), r"range length is 100 in the state but 101 here"),
    ],
)
def test_loading_a_state_from_another_chain_names_what_differs(
    other: dict[str, int], message: str
) -> None:
    args = dict(n=100, seed=3, world=2, rank=1, size=8, skip=0)
    state = training_chain(**args).state_dict()  # type: ignore[arg-type]
    changed = training_chain(**{**args, **other})  # type: ignore[arg-type]
    with pytest.raises(ds.ReproducibilityError, match=message):
        changed.load_state_dict(state)


def test_a_state_without_sample_positions_still_refuses_another_rank() -> None:
    state = ds.SkipBatchSampler(
        ds.DistributedBatchSampler(
            ds.RepeatBatchSampler(tud.BatchSampler(range(9), 2, False)), 2, 1
        ),
        1,
    ).state_dict()
    assert state["samples"] is None
    other = ds.SkipBatchSampler(
        ds.DistributedBatchSampler(
            ds.RepeatBatchSampler(tud.BatchSampler(range(9), 2, False)), 2, 0
        ),
        1,
    )
    with pytest.raises(ds.ReproducibilityError, match="shard rank is 1 in the state but 0 here"):
        other.load_state_dict(state)


def test_loading_a_state_from_other_stages_names_both_orders() -> None:
    state = ds.SkipSampler(ds.RepeatSampler(range(5)), 0).state_dict()
    with pytest.raises(
        ds.ReproducibilityError,
        match=r"the stages differ: the state has range > repeat > skip, "
        r"this chain has range > skip",
    ):
        ds.SkipSampler(range(5), 0).load_state_dict(state)


@pytest.mark.parametrize(
    ("state", "error", "message"),
    [
        ([], TypeError, "state should be a dict"),
        ({"position": 1}, ValueError, "lacks version, fingerprint, chain"),
        (
            {"version": 99, "position": 0, "fingerprint": "", "chain": []},
            ValueError,
            r"state\['version'\] should be 1",
        ),
        (
            {"version": 1, "position": -1, "fingerprint": "", "chain": []},
            ValueError,
            "non-negative integer",
        ),
    ],
)
def test_a_malformed_state_is_refused_clearly(state: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        ds.RepeatSampler(range(3)).load_state_dict(state)


def test_torchdata_stateful_dataloader_checkpoints_and_resumes_the_chain() -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    dataset = tud.TensorDataset(__import__("torch").arange(50))

    def loader() -> Any:
        return StatefulDataLoader(dataset, batch_sampler=training_chain(50, 7, 1, 0, 4, 0))

    reference = take(loader(), 30)
    first = loader()
    iterator = iter(first)
    head = [next(iterator) for _ in range(12)]
    state = first.state_dict()
    second = loader()
    second.load_state_dict(state)
    tail = take(second, 18)
    assert [b[0].tolist() for b in head + tail] == [b[0].tolist() for b in reference]


def test_a_skip_of_a_quadrillion_batches_is_computed_not_replayed() -> None:
    batch = take(training_chain(10**9, 1, 8, 5, 32, 10**15), 1)[0]
    assert len(batch) == 32 and all(0 <= x < 10**9 for x in batch)


def test_a_position_beyond_int64_is_refused_instead_of_wrapping() -> None:
    with pytest.raises(OverflowError, match="exceeds the int64 positions of the stream"):
        take(training_chain(100, 1, 8, 5, 32, 2**60), 1)


def test_a_chain_pickles_mid_iteration_and_the_copy_continues_the_stream() -> None:
    import pickle

    chain = training_chain(50, 2, 2, 1, 4, 3)
    iterator = iter(chain)
    [next(iterator) for _ in range(5)]
    copy = pickle.loads(pickle.dumps(chain))
    assert take(copy, 4) == take(chain, 4)
