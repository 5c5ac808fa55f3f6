"""Resume at a sample: any batch size, world size and num_workers per segment.

Ranks are simulated in one process (rank r of W built side by side). A *segment* trains
some global batches with its own batch size and world size, saves a state on one rank
and hands it to every rank of the next segment. The law (NOTE [ sample positions ]): the
concatenated global stream is the uninterrupted sample stream, so every record is seen
exactly once per epoch.
"""

from __future__ import annotations

from collections import Counter
from itertools import islice
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler

import detsamplers as ds
from tests.helpers import take
from tests.loader.loader_helpers import Noisy


def sample_stream(n: int, seed: int, count: int) -> list[int]:
    """The uninterrupted sample stream: the shuffled, repeated records."""
    return take(ds.RepeatSampler(ds.ReproducibleShuffleSampler(range(n), seed)), count)


def interleave(ranks: list[list[list[int]]], size: int) -> list[int]:
    """The global stream of ``ranks``' batches: record j of rank r's batch t is j W + r."""
    world = len(ranks)
    return [ranks[r][t][j] for t in range(len(ranks[0])) for j in range(size) for r in range(world)]


segments_strategy = st.lists(
    st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(0, 6)),  # B, W, batches
    min_size=1,
    max_size=5,
)


def run_segments(
    n: int, seed: int, segments: list[tuple[int, int, int]], via_state: bool
) -> list[int]:
    """Train the segments, each from the previous one's state; return the global stream."""
    stream: list[int] = []
    state: dict[str, Any] | None = None
    for size, world, count in segments:
        previous, ranks = state, []
        for rank in range(world):
            kwargs = {} if via_state else {"skip_samples": len(stream)}
            chain = ds.make_batch_sampler(range(n), "training", seed, world, rank, size, **kwargs)
            if via_state and previous is not None:
                chain.load_state_dict(previous)  # type: ignore[attr-defined]
            it = iter(chain)
            ranks.append([next(it) for _ in range(count)])
            if rank == (seed + count) % world:  # any rank's state will do
                state = chain.state_dict()  # type: ignore[attr-defined]
        stream += interleave(ranks, size)
        assert state is not None and state["samples"] == len(stream)
    return stream


@pytest.mark.parametrize("via_state", [True, False], ids=["state", "skip_samples"])
@given(n=st.integers(1, 30), seed=st.integers(0, 2**32), segments=segments_strategy)
def test_any_sequence_of_batch_and_world_sizes_concatenates_to_the_uninterrupted_stream(
    via_state: bool, n: int, seed: int, segments: list[tuple[int, int, int]]
) -> None:
    stream = run_segments(n, seed, segments, via_state)
    assert stream == sample_stream(n, seed, len(stream))


@given(n=st.integers(1, 20), seed=st.integers(0, 2**32), segments=segments_strategy)
def test_every_record_is_seen_exactly_once_per_epoch_across_segments(
    n: int, seed: int, segments: list[tuple[int, int, int]]
) -> None:
    stream = run_segments(n, seed, [*segments, (3, 2, 3 * n)], via_state=True)
    for epoch in range(len(stream) // n):
        assert Counter(stream[epoch * n : (epoch + 1) * n]) == Counter(range(n))


@given(
    n=st.integers(1, 30),
    seed=st.integers(0, 2**32),
    size=st.integers(1, 6),
    world=st.integers(1, 4),
    samples=st.integers(0, 200),
    skip=st.integers(0, 5),
)
def test_skip_samples_then_skip_batches_starts_at_sample_s_plus_k_global_batches(
    n: int, seed: int, size: int, world: int, samples: int, skip: int
) -> None:
    ranks = [
        take(ds.make_batch_sampler(range(n), "training", seed, world, r, size, skip,
                                   skip_samples=samples), 2)
        for r in range(world)
    ]  # fmt: skip
    start = samples + skip * size * world
    assert interleave(ranks, size) == sample_stream(n, seed, start + 2 * size * world)[start:]


def test_a_state_of_another_batch_size_keeps_its_samples_through_a_second_save() -> None:
    first = ds.make_batch_sampler(range(10), "training", 1, 2, 0, 3)
    take(first, 2)  # 2 global batches of 6: samples 0-11
    second = ds.make_batch_sampler(range(10), "training", 1, 1, 0, 5)
    second.load_state_dict(first.state_dict())  # type: ignore[attr-defined]
    take(second, 1)
    state = second.state_dict()  # type: ignore[attr-defined]
    assert (state["position"], state["samples"]) == (3, 17)  # 12 = 2 x 5 + 2, one batch on
    third = ds.make_batch_sampler(range(10), "training", 1, 1, 0, 5)
    third.load_state_dict(state)  # type: ignore[attr-defined]
    assert third.state_dict() == state  # type: ignore[attr-defined]
    assert take(third, 1) == [sample_stream(10, 1, 22)[17:22]]


def test_another_seed_or_dataset_is_still_refused_on_a_sample_resume() -> None:
    state = ds.make_batch_sampler(range(10), "training", 1, 2, 0, 3).state_dict()  # type: ignore[attr-defined]
    other_seed = ds.make_batch_sampler(range(10), "training", 2, 1, 0, 4)
    with pytest.raises(ds.ReproducibilityError, match="shuffle seed is 1 in the state but 2"):
        other_seed.load_state_dict(state)  # type: ignore[attr-defined]
    other_data = ds.make_batch_sampler(range(11), "training", 1, 1, 0, 4)
    with pytest.raises(ds.ReproducibilityError, match=r"the sample stream differs.*length"):
        other_data.load_state_dict(state)  # type: ignore[attr-defined]


def test_skip_samples_is_refused_where_batches_have_no_sample_positions() -> None:
    batches = ds.RepeatBatchSampler(BatchSampler(range(9), 2, False))
    with pytest.raises(ValueError, match="skip_samples should be 0 for this batch_sampler"):
        ds.SkipBatchSampler(batches, 0, skip_samples=3)
    with pytest.raises(ValueError, match="skip_samples should be 0 in validation mode"):
        ds.make_batch_sampler(range(9), "validation", 0, 1, 0, 2, skip_samples=1)
    with pytest.raises(ValueError, match="skip_samples should be a non-negative integer"):
        ds.make_batch_sampler(range(9), "training", 0, 1, 0, 2, skip_samples=-1)


# -- the loader: segments with num_workers, and per-record seeding ----------------------


def loader_segment(
    n: int,
    size: int,
    world: int,
    workers: int,
    count: int,
    samples: int,
    seeding: str = "batch",
) -> list[list[list[float]]]:
    """``count`` global batches of the loader from sample ``samples``, rows in stream order."""
    ranks = []
    for rank in range(world):
        loader = ds_loader(n, size, workers, seeding)
        train = loader.get_data_loader(True, 0, world, rank, skip_samples=samples)
        ranks.append([batch.tolist() for batch in islice(iter(train), count)])
    return [ranks[r][t][j] for t in range(count) for j in range(size) for r in range(world)]  # type: ignore[misc]


def ds_loader(n: int, size: int, workers: int, seeding: str) -> Any:
    from detsamplers.loader import DataLoader

    return DataLoader(
        Noisy(n), batch_size=size, shuffle=True, seed=11, num_workers=workers, seeding=seeding
    )


@settings(max_examples=25)
@given(
    n=st.integers(1, 20),
    segments=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 4)), min_size=1, max_size=4
    ),
)
def test_the_loader_concatenates_segments_to_the_uninterrupted_sample_stream(
    n: int, segments: list[tuple[int, int, int]]
) -> None:
    rows: list[list[float]] = []
    for size, world, count in segments:
        rows += loader_segment(n, size, world, 0, count, len(rows))
    assert [int(row[0]) for row in rows] == sample_stream(n, 11, len(rows))


@pytest.mark.workers
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_per_record_seeding_keeps_each_records_draws_across_batch_sizes_and_workers() -> None:
    # 2 ranks x 3 (2 workers each), then 1 rank x 5 (no workers), then 3 ranks x 1 (1 worker).
    rows = loader_segment(10, 3, 2, 2, 2, 0, "record")
    rows += loader_segment(10, 5, 1, 0, 2, len(rows), "record")
    rows += loader_segment(10, 1, 3, 1, 3, len(rows), "record")
    uninterrupted = loader_segment(10, 1, 1, 0, len(rows), 0, "record")
    assert [row[:4] for row in rows] == [row[:4] for row in uninterrupted]  # index and draws
    per_batch = loader_segment(10, 1, 1, 0, len(rows), 0, "batch")
    assert [row[0] for row in per_batch] == [row[0] for row in rows]
    assert [row[1:4] for row in per_batch] != [row[1:4] for row in rows]


def test_per_batch_keys_never_repeat_across_segments_of_other_batch_sizes() -> None:
    rows = loader_segment(10, 3, 2, 0, 2, 0)
    rows += loader_segment(10, 2, 1, 0, 3, len(rows))
    draws = [row[1] for row in rows]
    batches_draws = {draws[i] for i in range(len(draws))}
    assert len(batches_draws) == len(draws)  # a repeated key would repeat a first draw


def test_seeding_record_is_refused_with_a_batch_sampler() -> None:
    from detsamplers.loader import DataLoader

    with pytest.raises(ValueError, match="seeding='record' needs the records' sample positions"):
        DataLoader(Noisy(4), batch_sampler=BatchSampler(range(4), 2, False), seeding="record")
    with pytest.raises(ValueError, match="seeding should be one of 'batch', 'record'"):
        DataLoader(Noisy(4), seeding="sample")


def test_a_forged_digest_is_refused_on_a_resume_with_another_batch_size() -> None:
    from detsamplers.loader import DataLoader

    train = DataLoader(Noisy(10), batch_size=2, shuffle=True).get_data_loader(True, 0, 2, 1)
    take(train, 3)
    state = train.batch_sampler.state_dict()  # type: ignore[union-attr]
    target = DataLoader(Noisy(10), batch_size=3, shuffle=True).get_data_loader(True)
    with pytest.raises(ds.ReproducibilityError, match="the batches before sample 12 differ"):
        target.batch_sampler.load_state_dict({**state, "digest": "0" * 16})  # type: ignore[union-attr]
    target.batch_sampler.load_state_dict(state)  # type: ignore[union-attr]
    assert target.batch_sampler.state_dict()["samples"] == 12  # type: ignore[union-attr]


@given(n=st.integers(2, 12), segments=segments_strategy)
def test_a_mixture_resumes_at_a_sample_with_any_batch_and_world_size(
    n: int, segments: list[tuple[int, int, int]]
) -> None:
    def chain(size: int, world: int, rank: int) -> Any:
        mix = ds.MixSampler([range(n), range(n + 3)], [0.7, 0.3], 4)
        shard = ds.DistributedSampler(mix, world, rank)
        return ds.SkipBatchSampler(BatchSampler(shard, size, False), 0)

    stream: list[int] = []
    state: dict[str, Any] | None = None
    for size, world, count in segments:
        previous, ranks = state, []
        for rank in range(world):
            built = chain(size, world, rank)
            if previous is not None:
                built.load_state_dict(previous)
            ranks.append(take(built, count))
            state = built.state_dict()
        stream += interleave(ranks, size)
    uninterrupted = ds.MixSampler([range(n), range(n + 3)], [0.7, 0.3], 4)
    assert stream == take(uninterrupted, len(stream))


@pytest.mark.parametrize(
    ("samples", "error", "message"),
    [
        (True, TypeError, r"state\['samples'\] should be an integer from state_dict\(\)"),
        ("12", TypeError, r"state\['samples'\] should be an integer"),
        (-1, ValueError, r"state\['samples'\] should be a non-negative integer"),
        (2**63, ValueError, "at most 2\\*\\*62"),
    ],
)
@pytest.mark.parametrize("same_grid", [True, False], ids=["same grid", "other grid"])
def test_a_state_with_a_bad_samples_field_is_refused_clearly(
    samples: Any, error: type, message: str, same_grid: bool
) -> None:
    state = ds.make_batch_sampler(range(10), "training", 0, 2, 0, 3).state_dict()  # type: ignore[attr-defined]
    target = ds.make_batch_sampler(range(10), "training", 0, 2, 0, 3 if same_grid else 4)
    with pytest.raises(error, match=message):
        target.load_state_dict({**state, "samples": samples})  # type: ignore[attr-defined]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("num_workers", [0, 2])
def test_torchdatas_statefuldataloader_resumes_with_another_batch_size(num_workers: int) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    from detsamplers.loader import DataLoader

    def loader(size: int) -> Any:
        data = DataLoader(range(20), batch_size=size, shuffle=True, seed=3, num_workers=num_workers)
        return data.get_data_loader(True, loader_class=StatefulDataLoader)

    first = loader(3)
    iterator = iter(first)
    seen = [int(x) for _ in range(4) for x in next(iterator)]  # samples 0-11
    second = loader(5)
    second.load_state_dict(first.state_dict())
    seen += [int(x) for batch in islice(iter(second), 2) for x in batch]
    stream = ds.RepeatSampler(ds.ReproducibleShuffleSampler(range(20), 3))
    assert seen == take(stream, 22)


def test_a_state_saved_without_samples_resumes_at_its_position_from_sample_0() -> None:
    saved = ds.make_batch_sampler(range(10), "training", 1, 1, 0, 3, 4).state_dict()  # type: ignore[attr-defined]
    del saved["samples"]  # as an older release wrote it
    chain = ds.make_batch_sampler(range(10), "training", 1, 1, 0, 3, skip_samples=7)
    chain.load_state_dict(saved)  # type: ignore[attr-defined]
    assert take(chain, 1) == [sample_stream(10, 1, 15)[12:15]]
