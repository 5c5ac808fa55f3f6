"""Determined's own sampler chain (``determined.pytorch.samplers``), optional."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from types import ModuleType

import torch.utils.data as tud

from peers import Peer


def load() -> ModuleType:
    """``determined.pytorch.samplers`` (raises when it cannot be imported)."""
    return importlib.import_module("determined.pytorch.samplers")


def chain(det: ModuleType, n: int, world: int, batch: int, skip: int = 0) -> Iterable[list[int]]:
    """``SkipBatchSampler(BatchSampler(DistributedSampler(RepeatSampler(shuffle)), B), skip)``."""
    shuffle = det.ReproducibleShuffleSampler(tud.SequentialSampler(range(n)), 0)
    shard = det.DistributedSampler(det.RepeatSampler(shuffle), world, 0)
    batches: Iterable[list[int]] = det.SkipBatchSampler(tud.BatchSampler(shard, batch, False), skip)
    return batches


def shuffle_first(det: ModuleType, n: int) -> int:
    """The first index of Determined's ``ReproducibleShuffleSampler`` over ``range(n)``."""
    return int(next(iter(det.ReproducibleShuffleSampler(tud.SequentialSampler(range(n)), 0))))


PEERS = [
    Peer(
        name="Determined",
        distribution="determined",
        module="determined",
        how="SkipBatchSampler(BatchSampler(DistributedSampler(RepeatSampler("
        "ReproducibleShuffleSampler(SequentialSampler(range(N)), 0)), W, r), B), skip)",
    )
]
