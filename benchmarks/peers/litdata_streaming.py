"""Lightning's litdata: ``optimize`` writes its chunk format, ``StreamingDataset`` reads it."""

from __future__ import annotations

import concurrent.futures
import importlib
import multiprocessing
import os
from collections.abc import Callable, Iterator
from typing import Any

from harness.capability import Outcome, loader_capability, loader_rank_run, state_after
from harness.samples import PNG

from peers import Peer, ShardFormat


def _litdata() -> Any:
    return importlib.import_module("litdata")


def _sample(i: int) -> dict[str, Any]:
    return {"png": PNG, "cls": i}


def _optimize(out: str, total: int, per_shard: int) -> None:
    _litdata().optimize(
        fn=_sample,
        inputs=list(range(total)),
        output_dir=out,
        chunk_size=per_shard,
        num_workers=1,
        verbose=False,
    )


def write(folder: str, total: int, per_shard: int) -> str:
    """``litdata.optimize`` of the samples, ``chunk_size=per_shard``, one worker.

    It runs in a process of its own, as the offline step users run it as: in the
    measuring process the two queue threads ``optimize`` leaves running made every
    DataLoader after it (any library's, torch's plain one too) take about 2.5 s longer to
    start its workers (measured: ``iter()`` of a plain ``DataLoader`` with 2 workers 2.50 s
    after it, 0.017 s without).
    """
    out = os.path.join(folder, "litdata")
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        pool.submit(_optimize, out, total, per_shard).result()
    return out


def loader(folder: str, workers: int, batch: int, **options: Any) -> Any:
    """``StreamingDataLoader(StreamingDataset(folder, shuffle=True, seed=0), batch_size)``."""
    litdata = _litdata()
    dataset = litdata.StreamingDataset(folder, shuffle=True, seed=0, **options)
    return litdata.StreamingDataLoader(dataset, batch_size=batch, num_workers=workers)


def _labels(batch: Any) -> list[int]:
    """The labels of a batch (default_collate's tensor), as ours: ``.tolist()``."""
    labels: list[int] = batch["cls"].tolist()
    return labels


def epoch(folder: str, workers: int, batch: int) -> Iterator[list[int]]:
    """One epoch of the loader."""
    for out in loader(folder, workers, batch):
        yield _labels(out)


def resume(folder: str, batch: int, position: int) -> Callable[[], list[int]]:
    """The loader's ``state_dict()`` after ``position`` samples, loaded into a fresh loader.

    Reaching the state takes iterating up to ``position`` (epochs are ``iter()`` calls).
    """
    state = state_after(loader(folder, 0, batch), position, lambda out: len(out["cls"]))[0]

    def run() -> list[int]:
        fresh = loader(folder, 0, batch)
        fresh.load_state_dict(state)
        return _labels(next(iter(fresh)))

    return run


def rank_run(
    world: int,
    rank: int,
    batch: int,
    steps: int,
    save_at: int | None,
    state: dict[str, Any] | None,
    folder: str,
) -> dict[str, Any]:
    """One rank of a torchrun (litdata reads the world from torch.distributed).

    ``drop_last=True`` on any world size: litdata forces it on several ranks, and refuses a
    state saved with another.
    """
    return loader_rank_run(loader(folder, 0, batch, drop_last=True), _labels, state, steps, save_at)


def capability(quick: bool) -> dict[str, Outcome]:
    """StreamingDataLoader's state after CAP_AT steps, loaded into a fresh loader; on other
    world sizes through torchrun (``rank_run``)."""
    return loader_capability(__name__, write, loader, _labels, quick)


PEERS = [
    Peer(
        name="litdata",
        distribution="litdata",
        module="litdata",
        how="optimize(chunk_size=2,000 samples), in a process of its own (its start in the "
        "write time), then StreamingDataLoader(StreamingDataset("
        "dir, shuffle=True, seed=0), batch_size=B, num_workers=w): its defaults, chunks "
        "permuted and each chunk's samples shuffled in aligned blocks of 256 (in random "
        "order), decoded 256 rows at a time; resume: load_state_dict of the loader's "
        "state_dict()",
        shards=ShardFormat(write, epoch, resume),
        capability=capability,
    )
]
