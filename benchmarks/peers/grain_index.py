"""google grain: ``MapDataset.shuffle`` and the ``IndexSampler`` of its ``DataLoader``.

grain's shuffle is an index map (O(1) per index, a state of one integer), like ours.

The resumes read with the ``ReadOptions`` grain's ``options.py`` recommends for data
already in memory (``num_threads=0``; no prefetch buffer, so the first ``next()`` reads
one batch), as the main columns; the ``defaults`` columns (16 threads, a
500-element prefetch buffer that the first ``next()`` fills) are the same resumes with
grain's defaults.
"""

from __future__ import annotations

import importlib
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from harness.capability import (
    CAP_AT,
    CAP_BATCH,
    CAP_N,
    CAP_STEPS,
    Outcome,
    merge_ranks,
    outcome,
    same_stream,
    take,
)

from peers import Peer


def _grain() -> Any:
    return importlib.import_module("grain")


def in_memory() -> Any:
    """``ReadOptions(num_threads=0, prefetch_buffer_size=0)``: grain's advice for data in memory."""
    return _grain().ReadOptions(num_threads=0, prefetch_buffer_size=0)


def map_dataset(n: int, world: int, rank: int, batch: int) -> Any:
    """``MapDataset.range(n).shuffle(seed=0).repeat(None)[rank::world].batch(batch)``.

    ``shuffle`` then ``repeat`` draws a new permutation each epoch.
    """
    return _grain().MapDataset.range(n).shuffle(seed=0).repeat(None)[rank::world].batch(batch)


def map_batches(n: int, world: int, rank: int, batch: int) -> Iterator[Sequence[int]]:
    """The batches of ``map_dataset`` by random access, ``dataset[i]`` for i = 0, 1, ..."""
    dataset = map_dataset(n, world, rank, batch)
    for i in itertools.count():
        yield dataset[i]


def map_resume(
    n: int, batch: int, position: int, defaults: bool = False
) -> Callable[[], Sequence[int]]:
    """A fresh ``to_iter_dataset(read_options)`` iterator, ``set_state({"next_index": k})``,
    next batch; ``read_options`` is ``in_memory()``, or grain's default with ``defaults``."""
    state = {"next_index": position // batch}
    read_options = None if defaults else in_memory()

    def run() -> Sequence[int]:
        iterator = iter(map_dataset(n, 1, 0, batch).to_iter_dataset(read_options))
        iterator.set_state(state)
        out: Sequence[int] = next(iterator)
        return out

    return run


def map_shuffle_first(n: int) -> int:
    """The first index of ``MapDataset.range(n).shuffle(seed=0)``."""
    return int(_grain().MapDataset.range(n).shuffle(seed=0)[0])


def sampler(n: int, world: int, rank: int) -> Any:
    """``IndexSampler(n, ShardOptions(rank, world), shuffle=True, num_epochs=None, seed=0)``."""
    grain = _grain()
    shard = grain.sharding.ShardOptions(shard_index=rank, shard_count=world)
    return grain.samplers.IndexSampler(n, shard, shuffle=True, num_epochs=None, seed=0)


def sampler_batches(n: int, world: int, rank: int, batch: int) -> Iterator[Sequence[int]]:
    """The record keys at the indices grain's DataLoader asks for: rank, rank + W, ..."""
    indices = sampler(n, world, rank)
    steps = itertools.count(rank, world)
    while True:
        yield [indices[next(steps)].record_key for _ in range(batch)]


class _Records:
    """A data source whose record ``i`` is ``i``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index

    def __repr__(self) -> str:  # grain checks the source of a state by its repr
        return f"_Records({self.n})"


def loader(n: int, batch: int, defaults: bool = False) -> Any:
    """``grain.DataLoader`` over records ``0..n-1``, IndexSampler, no workers, Batch(batch),
    ``read_options=in_memory()`` (grain's default ``ReadOptions`` with ``defaults``)."""
    grain = _grain()
    return grain.DataLoader(
        data_source=_Records(n),
        sampler=sampler(n, 1, 0),
        worker_count=0,
        operations=[grain.transforms.Batch(batch)],
        read_options=None if defaults else in_memory(),
    )


def loader_state(n: int, batch: int, position: int) -> str:
    """The iterator state after ``position`` records, in grain's own format.

    grain's state names the last index read: written here from the state after one batch
    instead of iterating ``position`` records (``tests/test_bench_harness.py`` checks it
    equals the state after iterating, on a small N).
    """
    iterator = iter(loader(n, batch))
    next(iterator)
    state = json.loads(iterator.get_state())
    state["last_seen_indices"] = {"0": position - 1}
    return json.dumps(state, indent=4)


def loader_resume(
    n: int, batch: int, position: int, defaults: bool = False
) -> Callable[[], Sequence[int]]:
    """A fresh ``DataLoader`` iterator, ``set_state(state)``, next batch (``loader``'s
    ``defaults``)."""
    state = loader_state(n, batch, position).encode()

    def run() -> Sequence[int]:
        iterator = iter(loader(n, batch, defaults))
        iterator.set_state(state)
        out: Sequence[int] = next(iterator)
        return out

    return run


def sampler_shuffle_first(n: int) -> int:
    """The first record key of a fresh unsharded ``IndexSampler`` over ``n`` records."""
    return int(sampler(n, 1, 0)[0].record_key)


def _map_stream(world: int, workers: int, state: dict[str, int] | None) -> list[list[int]]:
    grain = _grain()
    per_rank = []
    for rank in range(world):
        dataset = map_dataset(CAP_N, world, rank, CAP_BATCH // world).to_iter_dataset()
        if workers:
            dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
        iterator = iter(dataset)
        if state is not None:
            iterator.set_state(state)
        per_rank.append(take(iterator, CAP_STEPS - (CAP_AT if state else 0)))
    return merge_ranks(per_rank)


def map_capability(quick: bool) -> dict[str, Outcome]:
    """The MapDataset pipeline, its iterator state saved at step CAP_AT on one rank."""
    iterator = iter(map_dataset(CAP_N, 1, 0, CAP_BATCH).to_iter_dataset())
    reference = take(iterator, CAP_STEPS)
    iterator = iter(map_dataset(CAP_N, 1, 0, CAP_BATCH).to_iter_dataset())
    take(iterator, CAP_AT)
    state = iterator.get_state()
    rest = reference[CAP_AT:]
    return {
        "same config": outcome(lambda: same_stream(rest, _map_stream(1, 0, state))),
        "other num_workers": outcome(lambda: same_stream(rest, _map_stream(1, 2, state))),
        "other world size": outcome(
            lambda: same_stream(rest, _map_stream(2, 0, state), ordered=False)
        ),
        "world size 2 to 1": outcome(_map_two_to_one),
    }


def _map_two_to_one() -> bool:
    """Rank 0's iterator state after CAP_AT steps on 2 ranks, resumed on one."""
    iterator = iter(map_dataset(CAP_N, 2, 0, CAP_BATCH // 2).to_iter_dataset())
    take(iterator, CAP_AT)
    state = iterator.get_state()
    rest = _map_stream(2, 0, None)[CAP_AT:]
    return same_stream(rest, _map_stream(1, 0, state), ordered=False)


def _loader(world: int, rank: int, workers: int) -> Any:
    grain = _grain()
    return grain.DataLoader(
        data_source=_Records(CAP_N),
        sampler=sampler(CAP_N, world, rank),
        worker_count=workers,
        operations=[grain.transforms.Batch(CAP_BATCH // world)],
    )


def _loader_stream(world: int, workers: int, state: bytes) -> list[list[int]]:
    per_rank = []
    for rank in range(world):
        iterator = iter(_loader(world, rank, workers))
        iterator.set_state(state)
        per_rank.append(take(iterator, CAP_STEPS - CAP_AT))
    return merge_ranks(per_rank)


def loader_capability(quick: bool) -> dict[str, Outcome]:
    """grain's DataLoader over IndexSampler, its iterator state saved at step CAP_AT."""
    reference = take(iter(_loader(1, 0, 0)), CAP_STEPS)
    iterator = iter(_loader(1, 0, 0))
    take(iterator, CAP_AT)
    state = iterator.get_state()
    rest = reference[CAP_AT:]
    return {
        "same config": outcome(lambda: same_stream(rest, _loader_stream(1, 0, state))),
        "other num_workers": outcome(lambda: same_stream(rest, _loader_stream(1, 2, state))),
        "other world size": outcome(
            lambda: same_stream(rest, _loader_stream(2, 0, state), ordered=False)
        ),
        "world size 2 to 1": outcome(_loader_two_to_one),
    }


def _loader_two_to_one() -> bool:
    """Rank 0's iterator state after CAP_AT steps on 2 ranks, resumed on one."""
    per_rank = [take(iter(_loader(2, rank, 0)), CAP_STEPS) for rank in range(2)]
    rest = merge_ranks(per_rank)[CAP_AT:]
    iterator = iter(_loader(2, 0, 0))
    take(iterator, CAP_AT)
    return same_stream(rest, _loader_stream(1, 0, iterator.get_state()), ordered=False)


PEERS = [
    Peer(
        name="grain MapDataset",
        distribution="grain",
        module="grain",
        how="MapDataset.range(N).shuffle(seed=0).repeat(None)[r::W].batch(B), read by "
        "dataset[i]; resume: to_iter_dataset(ReadOptions(num_threads=0, "
        "prefetch_buffer_size=0)) iterator set_state({'next_index': k}) (options.py's advice "
        "for data in memory)",
        index_batches=map_batches,
        resume=map_resume,
        shuffle_first=map_shuffle_first,
        capability=map_capability,
    ),
    Peer(
        name="grain IndexSampler",
        distribution="grain",
        module="grain",
        how="IndexSampler(N, ShardOptions(r, W), shuffle=True, num_epochs=None, seed=0) at "
        "indices r, r+W, ...; resume: DataLoader(worker_count=0, Batch(B), "
        "read_options=ReadOptions(num_threads=0, prefetch_buffer_size=0)) iterator set_state",
        index_batches=sampler_batches,
        resume=loader_resume,
        shuffle_first=sampler_shuffle_first,
        capability=loader_capability,
    ),
    Peer(
        name="grain MapDataset, defaults",
        distribution="grain",
        module="grain",
        how="grain MapDataset's resume with to_iter_dataset()'s default ReadOptions (16 "
        "threads, a prefetch buffer of 500 elements, filled by the first next())",
        resume=partial(map_resume, defaults=True),
    ),
    Peer(
        name="grain IndexSampler, defaults",
        distribution="grain",
        module="grain",
        how="grain IndexSampler's resume with DataLoader's default ReadOptions (16 threads, "
        "a prefetch buffer of 500)",
        resume=partial(loader_resume, defaults=True),
    ),
]
