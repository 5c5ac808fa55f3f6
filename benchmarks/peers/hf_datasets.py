"""Hugging Face datasets: ``to_iterable_dataset`` with its buffer shuffle and state API."""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from functools import cache
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

from peers import Peer, ours

#: Shards of the iterable dataset, and the shuffle buffer (the documented defaults
#: are 1 shard and 1,000 examples; more shards let split_dataset_by_node split by shard).
SHARDS = 64
BUFFER = 1000


def shards(world: int) -> int:
    """``SHARDS``, or ``world`` when ``SHARDS`` does not divide by it.

    ``split_dataset_by_node`` gives each rank whole shards only when ``num_shards %
    world_size == 0``; otherwise each rank reads every shard and keeps one example in
    ``world_size``, which is not what a user with that many ranks would run.
    """
    return SHARDS if SHARDS % world == 0 else world


@cache
def table(n: int) -> Any:
    """The arrow ``Dataset`` with column ``i`` = 0..n-1, built once per n (data, not sampler)."""
    datasets = importlib.import_module("datasets")
    datasets.disable_progress_bars()
    return datasets.Dataset.from_dict({"i": range(n)})


def stream(n: int, world: int, rank: int) -> Any:
    """``to_iterable_dataset(num_shards=shards(world)).shuffle(seed=0, buffer_size=1000)``
    ``.repeat(None)``, split with ``split_dataset_by_node(rank, world)``."""
    split = importlib.import_module("datasets.distributed").split_dataset_by_node
    iterable = table(n).to_iterable_dataset(num_shards=shards(world))
    shuffled = iterable.shuffle(seed=0, buffer_size=BUFFER)
    return split(shuffled.repeat(None), rank=rank, world_size=world)


def index_batches(n: int, world: int, rank: int, batch: int) -> Iterator[Sequence[int]]:
    """Batches of ``i`` through ``IterableDataset.iter(batch_size=batch)``."""
    for rows in stream(n, world, rank).iter(batch_size=batch):
        yield rows["i"]


def ours_rows(n: int, world: int, rank: int, batch: int) -> Iterator[Sequence[int]]:
    """Our training chain's batches of indices, each read as rows of the same arrow table.

    ``pyarrow.Table.take`` on the arrow table under HF's ``Dataset`` (``Dataset.data``),
    then the column to Python values: what HF datasets' cells do per batch, so that the two
    columns compare the same work. (``Dataset[indices]`` adds HF's formatting layer: about
    2.8 times the time of ``take`` a batch of 32 in a spot check.)
    """
    arrow = table(n).data.table
    for indices in ours.index_batches(n, world, rank, batch):
        yield arrow.take(indices).column("i").to_pylist()


def first(examples: Any, batch: int) -> list[int]:
    """The next ``batch`` values of ``i``."""
    return [row["i"] for row in itertools.islice(examples, batch)]


def resume(n: int, batch: int, position: int) -> Callable[[], Sequence[int]]:
    """``load_state_dict`` of the state saved after ``position`` examples, then a batch.

    Reaching the state takes iterating ``position`` examples (outside the timing).
    """
    ahead = stream(n, 1, 0)
    examples = iter(ahead)
    for _ in itertools.islice(examples, position):
        pass
    state = ahead.state_dict()

    def run() -> Sequence[int]:
        fresh = stream(n, 1, 0)
        fresh.load_state_dict(state)
        return first(iter(fresh), batch)

    return run


def _loader(world: int, rank: int, workers: int) -> Any:
    stateful = importlib.import_module("torchdata.stateful_dataloader").StatefulDataLoader
    return stateful(stream(CAP_N, world, rank), batch_size=CAP_BATCH // world, num_workers=workers)


def _labels(loader: Any) -> Iterator[list[int]]:
    for rows in loader:
        yield [int(i) for i in rows["i"]]


def _stream(world: int, workers: int, state: dict[str, Any]) -> list[list[int]]:
    per_rank = []
    for rank in range(world):
        loader = _loader(world, rank, workers)
        loader.load_state_dict(state)
        per_rank.append(take(_labels(loader), CAP_STEPS - CAP_AT))
    return merge_ranks(per_rank)


def capability(quick: bool) -> dict[str, Outcome]:
    """torchdata's StatefulDataLoader over the stream (HF's way to resume with workers)."""
    reference = take(_labels(_loader(1, 0, 0)), CAP_STEPS)[CAP_AT:]
    ahead = _loader(1, 0, 0)
    take(_labels(ahead), CAP_AT)
    state = ahead.state_dict()
    return {
        "same config": outcome(lambda: same_stream(reference, _stream(1, 0, state))),
        "other num_workers": outcome(lambda: same_stream(reference, _stream(1, 2, state))),
        "other world size": outcome(
            lambda: same_stream(reference, _stream(2, 0, state), ordered=False)
        ),
        "world size 2 to 1": outcome(_two_to_one),
    }


def _two_to_one() -> bool:
    """Rank 0's loader state after CAP_AT steps on 2 ranks, resumed on one."""
    per_rank = [take(_labels(_loader(2, rank, 0)), CAP_STEPS) for rank in range(2)]
    rest = merge_ranks(per_rank)[CAP_AT:]
    ahead = _loader(2, 0, 0)
    take(_labels(ahead), CAP_AT)
    return same_stream(rest, _stream(1, 0, ahead.state_dict()), ordered=False)


PEERS = [
    Peer(
        name="HF datasets",
        distribution="datasets",
        module="datasets",
        how=f"Dataset.to_iterable_dataset(num_shards={SHARDS}, or W when {SHARDS} % W != 0)"
        f".shuffle(seed=0, buffer_size={BUFFER}).repeat(None), split_dataset_by_node(r, W) "
        "(whole shards per rank), .iter(batch_size=B): rows read from arrow; resume: "
        "load_state_dict of state_dict()",
        index_batches=index_batches,
        resume=resume,
        resume_max_n=10**6,
        capability=capability,
    ),
    Peer(
        name="detsamplers + arrow rows",
        distribution="datasets",
        module="datasets",
        how="detsamplers' training chain, each batch of indices read from the arrow table of "
        "HF's Dataset, Dataset.data.table.take(indices).column('i').to_pylist(): the work of "
        "HF's cells",
        index_batches=ours_rows,
    ),
]
