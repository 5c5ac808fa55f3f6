"""Exact resume: every position, other world sizes and worker counts, and refused states."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from wds_helpers import TOTAL, global_stream, make, noisy_label, simulate, write_shards

from detsamplers import ReproducibilityError
from detsamplers.loader import WebDataLoader, WebDatasetSource
from detsamplers.loader._wds.read import _shard_reader

few_workers = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def rows(batch: Any) -> list[tuple[Any, ...]]:
    """A batch of (label, draws...) tuples as plain rows (default_collate transposes them)."""
    return [tuple(float(column[i]) for column in batch) for i in range(len(batch[0]))]


def run(source: WebDatasetSource, steps: int) -> tuple[list[Any], list[dict[str, Any]]]:
    """The first ``steps`` batches and the state after each (states[i]: after i batches)."""
    states = [json.loads(json.dumps(source.state_dict()))]
    batches = []
    iterator = iter(source)
    for _ in range(steps):
        batches.append(rows(next(iterator)))
        states.append(json.loads(json.dumps(source.state_dict())))
    return batches, states


@pytest.mark.parametrize("batch_size", [1, 3])
def test_resuming_at_every_position_of_a_stream_gives_the_uninterrupted_batches(
    shards: str, batch_size: int
) -> None:
    options: dict[str, Any] = {"batch_size": batch_size, "map": noisy_label, "shuffle_window": 5}
    steps = -(-2 * TOTAL // batch_size) + 2  # past two epoch boundaries, mid-shard and mid-window
    reference, states = run(make(shards, **options), steps)
    for start in range(steps):
        resumed = make(shards, **options)
        resumed.load_state_dict(states[start])
        assert run(resumed, min(3, steps - start))[0] == reference[start : start + 3]


def test_after_a_batch_the_callers_global_rngs_follow_that_batchs_stream(shards: str) -> None:
    # NOTE [ per-batch seeding ]: in the main process the map stage leaves the global RNGs
    # in the batch's stream, so what the caller draws next depends on the position only.
    after = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed), np.random.seed(global_seed), random.seed(global_seed)
        source = make(shards, map=noisy_label)
        iterator = iter(source)
        next(iterator)
        after.append((torch.rand(()).item(), np.random.rand(), random.random()))
        next(iterator)
        after.append((torch.rand(()).item(), np.random.rand(), random.random()))
    assert after[:2] == after[2:]
    assert after[0] != after[1]


@settings(max_examples=25)
@given(
    steps=st.integers(0, 20),
    before=st.sampled_from([(1, 12), (2, 6), (4, 3)]),
    after=st.sampled_from([(1, 12), (3, 4), (4, 3), (6, 2)]),
    workers=st.tuples(st.integers(0, 3), st.integers(0, 3)),
)
def test_resuming_with_another_world_size_and_worker_count_loses_and_repeats_nothing(
    shards: str,
    steps: int,
    before: tuple[int, int],
    after: tuple[int, int],
    workers: tuple[int, int],
) -> None:
    def ranks(world_size: int, batch_size: int) -> list[WebDatasetSource]:
        return [
            make(shards, batch_size=batch_size, world_size=world_size, rank=r, shuffle_window=3)
            for r in range(world_size)
        ]

    uninterrupted = global_stream(ranks(*before), 0, steps + 10)
    first = ranks(*before)
    head = global_stream(first, workers[0], steps)
    states = [s.state_dict() for s in first]
    if workers[0] == 0:
        assert all(state == states[0] for state in states)  # the state is rank-independent
    else:  # worker processes advance no state here: the simulated loader's count stands in
        states = [{**states[0], "position": steps * 12}]
    second = ranks(*after)
    for source in second:
        source.load_state_dict(states[0])
    tail = global_stream(second, workers[1], 10)
    assert head + tail == uninterrupted


@pytest.mark.workers
@few_workers
def test_a_loader_with_workers_saves_the_position_of_the_batches_it_handed_out(
    shards: str,
) -> None:
    source = make(shards, batch_size=4, shuffle_window=6, map=noisy_label)
    loader = WebDataLoader(source, num_workers=2)
    iterator = iter(loader)
    head = [rows(next(iterator)) for _ in range(7)]  # workers have prefetched further
    state = loader.state_dict()
    assert state["position"] == 7 * 4
    del iterator
    reference = run(make(shards, batch_size=4, shuffle_window=6, map=noisy_label), 12)[0]
    assert head == reference[:7]
    for workers in (0, 3):
        resumed = WebDataLoader(
            make(shards, batch_size=4, shuffle_window=6, map=noisy_label), num_workers=workers
        )
        resumed.load_state_dict(state)
        got = []
        for batch in resumed:
            got.append(rows(batch))
            if len(got) == 5:
                break
        assert got == reference[7:12]


def test_resuming_opens_the_shard_of_the_position_and_reads_nothing_before_it(
    shards: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    position = 2 * TOTAL + 40  # mid epoch 2, inside a shard
    reads: list[tuple[int, int]] = []
    spans: list[tuple[int, int]] = []
    original, span = _shard_reader.ShardReader.read_many, _shard_reader.ShardReader._span

    def spy(self: Any, shards: list[int], indexes: list[int]) -> list[dict[str, Any]]:
        reads.extend(zip(shards, indexes, strict=True))
        return original(self, shards, indexes)

    def spy_span(self: Any, shard: int, start: int, end: int) -> bytes:
        spans.append((start, end))
        return span(self, shard, start, end)

    monkeypatch.setattr(_shard_reader.ShardReader, "read_many", spy)
    monkeypatch.setattr(_shard_reader.ShardReader, "_span", spy_span)
    source = make(shards, batch_size=1, shuffle_window=4)
    source.load_state_dict({**source.state_dict(), "position": position})
    next(iter(source))
    shard, index = source._order.locate(np.array([position]))
    assert reads == [(int(shard[0]), int(index[0]))]
    members = source.shards[int(shard[0])].members[int(index[0])]
    # That sample's bytes, from its first member's tar header (checked on read).
    assert spans == [(members[0][1] - 512, members[-1][1] + members[-1][2])]


@settings(max_examples=25)
@given(
    segments=st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(0, 3), st.integers(0, 6)),
        min_size=1,
        max_size=4,
    ),  # world size, batch size, num_workers, steps
    blocks=st.sampled_from([0, 4]),  # shuffle_block_shards
)
def test_any_sequence_of_batch_and_world_sizes_continues_the_sample_stream(
    shards: str, segments: list[tuple[int, int, int, int]], blocks: int
) -> None:
    stream: list[int] = []
    state: dict[str, Any] | None = None
    for world, size, workers, steps in segments:
        ranks = [
            make(shards, batch_size=size, world_size=world, rank=r, shuffle_block_shards=blocks)
            for r in range(world)
        ]
        for source in ranks:
            if state is not None:
                source.load_state_dict(state)  # any position, not only multiples of B * W
        stream += global_stream(ranks, workers, steps)
        if workers == 0:
            assert all(source.state_dict()["position"] == len(stream) for source in ranks)
        state = {**ranks[0].state_dict(), "position": len(stream)}  # workers advance no state
    reference = [make(shards, batch_size=1, shuffle_block_shards=blocks)]
    assert stream == global_stream(reference, 0, len(stream))


def test_a_validation_pass_still_resumes_only_at_a_whole_global_batch(shards: str) -> None:
    state = make(shards, batch_size=2, skip=3, repeat=False).state_dict()  # position 6
    with pytest.raises(ValueError, match=r"position'\]=6 should be a multiple of the global batch"):
        make(shards, batch_size=4, repeat=False).load_state_dict(state)
    with pytest.raises(ValueError, match="skip_samples should be 0 with repeat=False"):
        make(shards, repeat=False, skip_samples=3)
    with_samples = make(shards, batch_size=4, skip_samples=6, skip=1)
    assert with_samples.state_dict()["position"] == 10
    assert with_samples.for_rank(world_size=3, rank=2, skip_samples=7).state_dict()["position"] == 7


def test_a_state_from_another_seed_or_shuffle_is_refused_naming_the_field(shards: str) -> None:
    state = make(shards, seed=1).state_dict()
    with pytest.raises(ReproducibilityError, match="seed is 1 in the state but 2 here"):
        make(shards, seed=2).load_state_dict(state)
    with pytest.raises(ReproducibilityError, match="shuffle_window is 0 in the state but 3 here"):
        make(shards, seed=1, shuffle_window=3).load_state_dict(state)


def test_a_shard_whose_sample_count_changed_since_the_checkpoint_is_named(
    shards: str, tmp_path: Path
) -> None:
    folder = Path(shards).parent
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    state = make(str(copy / Path(shards).name), batch_size=2, skip=5).state_dict()
    counts = [3, 20, 7, 12, 5, 16, 9]  # shard 3 gained a sample
    write_shards(copy, counts)
    rebuilt = make(str(copy / Path(shards).name), batch_size=2)
    with pytest.raises(
        ReproducibilityError,
        match=r"shard '.*data-000003\.tar' had 11 samples when the state was saved but has 12",
    ):
        rebuilt.load_state_dict(state)


def test_a_state_from_other_shard_files_is_refused(shards: str, tmp_path: Path) -> None:
    pattern = write_shards(tmp_path, [3, 20, 7, 11, 5, 16, 9])
    renamed = [str(tmp_path / f"data-{i:06d}.tar") for i in (1, 0, 2, 3, 4, 5, 6)]
    state = make(pattern).state_dict()
    state["counts"] = [20, 3, 7, 11, 5, 16, 9]
    with pytest.raises(ReproducibilityError, match="shard file names or their order differ"):
        make(renamed).load_state_dict(state)


def test_malformed_states_are_refused_with_the_key_at_fault(shards: str) -> None:
    source = make(shards)
    with pytest.raises(TypeError, match="state should be a dict"):
        source.load_state_dict([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="but it lacks counts"):
        source.load_state_dict({k: v for k, v in source.state_dict().items() if k != "counts"})
    with pytest.raises(ValueError, match=r"state\['version'\] should be 2"):
        source.load_state_dict({**source.state_dict(), "version": 9})
    with pytest.raises(ValueError, match=r"state\['position'\] should be a non-negative"):
        source.load_state_dict({**source.state_dict(), "position": -2})


@settings(max_examples=30)
@given(world_size=st.integers(1, 4), batch_size=st.integers(1, 12), drop_last=st.booleans())
def test_a_validation_pass_reads_each_sample_once_and_len_is_exact_per_rank(
    shards: str, world_size: int, batch_size: int, drop_last: bool
) -> None:
    sources = [
        make(
            shards,
            batch_size=batch_size,
            world_size=world_size,
            rank=r,
            repeat=False,
            drop_last=drop_last,
        )
        for r in range(world_size)
    ]
    per_rank = [simulate(s, 0, 10**6) for s in sources]
    assert [len(batches) for batches in per_rank] == [len(s) for s in sources]
    seen = sorted(x for batches in per_rank for batch in batches for x in batch)
    global_batch = batch_size * world_size
    if drop_last:
        assert len({len(b) for b in per_rank}) == 1  # ranks in step: no collective can hang
        assert all(len(batch) == batch_size for b in per_rank for batch in b)
        assert len(seen) == len(set(seen)) == TOTAL // global_batch * global_batch
    else:
        assert seen == list(range(TOTAL))
        assert max(map(len, per_rank)) - min(map(len, per_rank)) <= 1
    again = simulate(sources[0], 0, 10**6)  # a finished pass starts over
    assert again == per_rank[0]


def test_training_streams_give_every_rank_a_full_batch_at_every_step(shards: str) -> None:
    for rank in range(3):
        batches = simulate(make(shards, batch_size=5, world_size=3, rank=rank), 2, 40)
        assert [len(b) for b in batches] == [5] * 40  # 40 * 15 = 600 samples, 8+ epochs


def test_arguments_are_checked_with_messages_that_name_them(shards: str) -> None:
    with pytest.raises(ValueError, match="batch_size should be a positive integer value"):
        make(shards, batch_size=0)
    with pytest.raises(TypeError, match="world_size should be a positive integer value"):
        make(shards, world_size=True)
    with pytest.raises(ValueError, match=r"rank should be an integer in \[0, world_size\)"):
        make(shards, world_size=2, rank=2)
    with pytest.raises(TypeError, match="shuffle_shards should be a bool"):
        make(shards, shuffle_shards=1)
    with pytest.raises(TypeError, match="map should be a callable or None"):
        make(shards, map=3)
    with pytest.raises(TypeError, match="decode should be a webdataset image spec"):
        make(shards, decode=[3])
    with pytest.raises(TypeError, match="urls should be a string"):
        make(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="len\\(\\) of a WebDatasetSource with repeat=True"):
        len(make(shards))
    with pytest.raises(TypeError, match="source should be a WebDatasetSource"):
        WebDataLoader([1, 2])  # type: ignore[arg-type]


def test_skip_starts_at_that_global_batch_without_reading_the_ones_before(shards: str) -> None:
    reference = simulate(make(shards, batch_size=4), 0, 30)
    assert simulate(make(shards, batch_size=4, skip=25), 0, 5) == reference[25:]
