"""Lightning's litdata: ``optimize`` writes its chunk format, ``StreamingDataset`` reads it."""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from harness.capability import Outcome, outcome, same_stream, take, world_change
from harness.samples import PNG

from peers import Peer, ShardFormat


def _litdata() -> Any:
    return importlib.import_module("litdata")


def _sample(i: int) -> dict[str, Any]:
    return {"png": PNG, "cls": i}


def write(folder: str, total: int, per_shard: int) -> str:
    """``litdata.optimize`` of the samples, ``chunk_size=per_shard``, one worker."""
    out = os.path.join(folder, "litdata")
    _litdata().optimize(
        fn=_sample,
        inputs=list(range(total)),
        output_dir=out,
        chunk_size=per_shard,
        num_workers=1,
        verbose=False,
    )
    return out


def loader(folder: str, workers: int, batch: int, **options: Any) -> Any:
    """``StreamingDataLoader(StreamingDataset(folder, shuffle=True, seed=0), batch_size)``."""
    litdata = _litdata()
    dataset = litdata.StreamingDataset(folder, shuffle=True, seed=0, **options)
    return litdata.StreamingDataLoader(dataset, batch_size=batch, num_workers=workers)


def _labels(batch: Any) -> list[int]:
    return [int(x) for x in batch["cls"]]


def epoch(folder: str, workers: int, batch: int) -> Iterator[list[int]]:
    """One epoch of the loader."""
    for out in loader(folder, workers, batch):
        yield _labels(out)


def resume(folder: str, batch: int, position: int) -> Callable[[], list[int]]:
    """The loader's ``state_dict()`` after ``position`` samples, loaded into a fresh loader.

    Reaching the state takes iterating up to ``position`` (epochs are ``iter()`` calls).
    """
    ahead = loader(folder, 0, batch)
    seen = 0
    while seen < position:
        for out in ahead:
            seen += len(out["cls"])
            if seen >= position:
                break
    state = ahead.state_dict()

    def run() -> list[int]:
        fresh = loader(folder, 0, batch)
        fresh.load_state_dict(state)
        return _labels(next(iter(fresh)))

    return run


#: Question 5: records, global batch, steps taken, resume step (mid-epoch 2).
CAP_N, CAP_BATCH, CAP_STEPS, CAP_AT = 160, 16, 25, 13


def _endless(loader: Any) -> Iterator[list[int]]:
    while True:  # an epoch per iter(), as a training loop drives it
        for out in loader:
            yield _labels(out)


def _stream(folder: str, workers: int, state: dict[str, Any]) -> list[list[int]]:
    fresh = loader(folder, workers, CAP_BATCH)
    fresh.load_state_dict(state)
    return take(_endless(fresh), CAP_STEPS - CAP_AT)


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

    ``steps`` batches of ``batch`` from a fresh loader (``state`` loaded first if given),
    and the loader's ``state_dict()`` after ``save_at`` of them. ``drop_last=True`` on any
    world size: litdata forces it on several ranks, and refuses a state saved with another.
    """
    fresh = loader(folder, 0, batch, drop_last=True)
    if state is not None:
        fresh.load_state_dict(state)
    batches: list[list[int]] = []
    saved = None
    for labels in _endless(fresh):
        batches.append(labels)
        if len(batches) == save_at:
            saved = fresh.state_dict()
        if len(batches) == steps:
            break
    return {"batches": batches, "state": saved}


def capability(quick: bool) -> dict[str, Outcome]:
    """StreamingDataLoader's state after CAP_AT steps, loaded into a fresh loader; on other
    world sizes through torchrun (``rank_run``)."""
    with tempfile.TemporaryDirectory() as parent:
        folder = write(parent, CAP_N, CAP_N // 4)
        reference = take(_endless(loader(folder, 0, CAP_BATCH)), CAP_STEPS)[CAP_AT:]
        ahead = loader(folder, 0, CAP_BATCH)
        take(_endless(ahead), CAP_AT)
        state = ahead.state_dict()
        result: dict[str, Outcome] = {
            "same config": outcome(lambda: same_stream(reference, _stream(folder, 0, state))),
            "other num_workers": outcome(lambda: same_stream(reference, _stream(folder, 2, state))),
        }
        if quick:
            skip = "not checked (--quick: torchrun)"
            return {**result, "other world size": skip, "world size 2 to 1": skip}
        steps = (CAP_STEPS, CAP_AT, CAP_BATCH)
        return {
            **result,
            "other world size": world_change(__name__, {"folder": folder}, (1, 2), *steps),
            "world size 2 to 1": world_change(__name__, {"folder": folder}, (2, 1), *steps),
        }


PEERS = [
    Peer(
        name="litdata",
        distribution="litdata",
        module="litdata",
        how="optimize(chunk_size=2,000 samples) then StreamingDataLoader(StreamingDataset("
        "dir, shuffle=True, seed=0), batch_size=B, num_workers=w); resume: load_state_dict "
        "of the loader's state_dict()",
        shards=ShardFormat(write, epoch, resume),
        capability=capability,
    )
]
