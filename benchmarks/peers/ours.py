"""detsamplers: the chain ``make_batch_sampler`` and the shard source ``WebDatasetSource``."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch.utils.data as tud
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
from harness.samples import PNG

import detsamplers as ds
from detsamplers.loader import WebDataLoader, WebDatasetSource
from detsamplers.loader._wds.index._remote_index import write_index
from detsamplers.loader._wds.remote._remote_reads import RemoteOptions
from detsamplers.loader._wds.remote._urls import expand_urls
from peers import Peer, ShardFormat


def index_batches(n: int, world: int, rank: int, batch: int) -> Iterable[list[int]]:
    """The training chain over ``range(n)``: shuffle, repeat, shard, batch."""
    return ds.make_batch_sampler(
        range(n), "training", shuffle_seed=0, num_workers=world, rank=rank, batch_size=batch
    )


def resume(n: int, batch: int, position: int) -> Callable[[], Sequence[int]]:
    """Load the chain's state at ``position`` samples (its Stateful API) into a fresh chain."""
    at = ds.make_batch_sampler(
        range(n), "training", shuffle_seed=0, num_workers=1, rank=0, batch_size=batch,
        skip=position // batch,
    )  # fmt: skip
    saved = at.state_dict()  # type: ignore[attr-defined]

    def run() -> Sequence[int]:
        chain = index_batches(n, 1, 0, batch)
        chain.load_state_dict(saved)  # type: ignore[attr-defined]
        return next(iter(chain))

    return run


def shuffle_first(n: int) -> int:
    """The first index of ``ReproducibleShuffleSampler`` over ``range(n)``."""
    return next(iter(ds.ReproducibleShuffleSampler(tud.SequentialSampler(range(n)), 0)))


def write_tar(folder: str, total: int, per_shard: int) -> str:
    """webdataset tar shards written with ``webdataset.ShardWriter``; their brace pattern."""
    import webdataset as wds

    pattern = os.path.join(folder, "wds-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=per_shard, verbose=0) as sink:
        for i in range(total):
            sink.write({"__key__": f"{i:08d}", "png": PNG, "cls": i})
    shards = -(-total // per_shard)
    return os.path.join(folder, f"wds-{{000000..{shards - 1:06d}}}.tar")


SERVER = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_http_server.py"
)


def write_http(folder: str, total: int, per_shard: int) -> str:
    """``write_tar`` into a folder served over loopback HTTP; the ``http://`` pattern.

    The server (``benchmarks/_http_server.py``, aiohttp, Range requests) runs in a process
    of its own until this one exits; the index files are written over HTTP next to the
    shards (``write_index``, what ``python -m detsamplers index URL`` does).
    """
    served = os.path.join(folder, "http")
    os.mkdir(served)
    pattern = write_tar(served, total, per_shard)
    server = subprocess.Popen([sys.executable, SERVER, served], stdout=subprocess.PIPE, text=True)
    atexit.register(server.terminate)
    assert server.stdout is not None
    base = f"http://127.0.0.1:{server.stdout.readline().strip()}"
    urls = f"{base}/{os.path.basename(pattern)}"
    for url in expand_urls(urls):
        write_index(url, RemoteOptions(), out=served)
    return urls


def _pair(sample: dict[str, Any]) -> tuple[bytes, int]:
    return sample["png"], int(sample["cls"])


def source(urls: str, batch: int, **kwargs: Any) -> WebDatasetSource:
    """``WebDatasetSource(urls, seed=0, batch_size=batch, decode=(), map=(png, cls))``."""
    return WebDatasetSource(urls, seed=0, batch_size=batch, decode=(), map=_pair, **kwargs)


#: Question 4's sample shuffle: samples shuffled within windows of a shard's 2,000 samples,
#: the work litdata's ``shuffle=True`` (samples permuted within each chunk of 2,000) and
#: Mosaic's py1e (samples shuffled within blocks) do, so that every side shuffles samples.
SAMPLE_WINDOW = 2000


def shard_epoch(urls: str, workers: int, batch: int) -> Iterator[list[int]]:
    """One epoch (``repeat=False``, the shard and window shuffles) here or in ``WebDataLoader``."""
    stream = source(urls, batch, repeat=False, shuffle_window=SAMPLE_WINDOW)
    batches: Iterable[Any] = WebDataLoader(stream, num_workers=workers) if workers else stream
    for _, labels in batches:
        yield labels.tolist()


def shard_resume(urls: str, batch: int, position: int) -> Callable[[], list[int]]:
    """``load_state_dict`` of the state at ``position`` into a freshly built source."""
    state = {**source(urls, batch, shuffle_window=SAMPLE_WINDOW).state_dict(), "position": position}

    def run() -> list[int]:
        fresh = source(urls, batch, shuffle_window=SAMPLE_WINDOW)
        fresh.load_state_dict(state)
        labels: list[int] = next(iter(fresh))[1].tolist()
        return labels

    return run


def _chain_stream(world: int, workers: int, skip: int) -> list[list[int]]:
    per_rank = []
    for rank in range(world):
        chain = ds.make_batch_sampler(
            range(CAP_N), "training", shuffle_seed=0, num_workers=world, rank=rank,
            batch_size=CAP_BATCH // world, skip=skip,
        )  # fmt: skip
        data: Any = list(range(CAP_N))
        loader: tud.DataLoader[Any] = tud.DataLoader(data, batch_sampler=chain, num_workers=workers)
        per_rank.append(take(loader, CAP_STEPS - skip))
    return merge_ranks(per_rank)


def rank_run(
    world: int, rank: int, batch: int, steps: int, save_at: int | None, state: Any
) -> dict[str, Any]:
    """One rank of a torchrun (``harness.capability.world_change``): the chain over
    ``range(CAP_N)`` on rank ``rank`` of ``world``, resumed from ``state`` (``{"skip": k}``,
    the global step), and the state after ``save_at`` steps."""
    skip = int(state["skip"]) if state else 0
    chain = ds.make_batch_sampler(
        range(CAP_N), "training", shuffle_seed=0, num_workers=world, rank=rank,
        batch_size=batch, skip=skip,
    )  # fmt: skip
    saved = None if save_at is None else {"skip": skip + save_at}
    return {"batches": take(chain, steps), "state": saved}


def capability(quick: bool) -> dict[str, Outcome]:
    """The chain under torch's DataLoader, resumed with ``skip`` (its state, one integer)."""
    reference = _chain_stream(1, 0, 0)[CAP_AT:]
    return {
        "same config": outcome(lambda: same_stream(reference, _chain_stream(1, 0, CAP_AT))),
        "other num_workers": outcome(lambda: same_stream(reference, _chain_stream(1, 2, CAP_AT))),
        "other world size": outcome(
            lambda: same_stream(reference, _chain_stream(2, 0, CAP_AT), ordered=False)
        ),
        "world size 2 to 1": outcome(
            lambda: same_stream(
                _chain_stream(2, 0, 0)[CAP_AT:], _chain_stream(1, 0, CAP_AT), ordered=False
            )
        ),
    }


def _source_stream(urls: str, world: int, workers: int, position: int) -> list[list[int]]:
    base = source(urls, CAP_BATCH // world, shuffle_window=8)
    state = {**base.state_dict(), "position": position}
    per_rank = []
    for rank in range(world):
        part = base.for_rank(world_size=world, rank=rank)
        part.load_state_dict(state)
        batches: Iterable[Any] = WebDataLoader(part, num_workers=workers) if workers else part
        per_rank.append(take((labels for _, labels in batches), CAP_STEPS - position // CAP_BATCH))
    return merge_ranks(per_rank)


def shard_capability(quick: bool) -> dict[str, Outcome]:
    """WebDatasetSource (shard and window shuffles), resumed with ``load_state_dict``."""
    with tempfile.TemporaryDirectory() as folder:
        urls = write_tar(folder, CAP_N, CAP_N // 4)
        reference = _source_stream(urls, 1, 0, 0)[CAP_AT:]
        at = CAP_AT * CAP_BATCH
        return {
            "same config": outcome(lambda: same_stream(reference, _source_stream(urls, 1, 0, at))),
            "other num_workers": outcome(
                lambda: same_stream(reference, _source_stream(urls, 1, 2, at))
            ),
            "other world size": outcome(
                lambda: same_stream(reference, _source_stream(urls, 2, 0, at), ordered=False)
            ),
            "world size 2 to 1": outcome(
                lambda: same_stream(
                    _source_stream(urls, 2, 0, 0)[CAP_AT:],
                    _source_stream(urls, 1, 0, at),
                    ordered=False,
                )
            ),
        }


PEERS = [
    Peer(
        name="detsamplers",
        how="make_batch_sampler(range(N), 'training', shuffle_seed=0, num_workers=W, rank=r, "
        "batch_size=B); resume: load_state_dict of the chain's state_dict; shards: "
        "WebDatasetSource(tar shards, seed=0, batch_size=B, decode=(), shuffle_shards=True, "
        "shuffle_window=2,000), WebDataLoader with workers; labels: the batch tensor's .tolist()",
        index_batches=index_batches,
        resume=resume,
        shuffle_first=shuffle_first,
        shards=ShardFormat(write_tar, shard_epoch, shard_resume),
        capability=capability,
    ),
    Peer(
        name="detsamplers WebDatasetSource",
        how="WebDatasetSource(tar shards, seed=0, shuffle_window=8), for_rank(W, r), "
        "WebDataLoader with workers; resume: load_state_dict",
        capability=shard_capability,
    ),
    Peer(
        name="detsamplers over HTTP",
        how="the same WebDatasetSource over http://127.0.0.1 (an aiohttp server in another "
        "process; Range requests, index files written over HTTP next to the shards)",
        shards=ShardFormat(write_http, shard_epoch, shard_resume),
    ),
]
