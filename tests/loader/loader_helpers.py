"""Shared datasets and helpers for the loader tests (module-level so workers can pickle them)."""

from __future__ import annotations

import random
from itertools import islice
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud

WORKER_FLAG = 0


class Noisy(tud.Dataset[torch.Tensor]):
    """Each record is its index plus one draw from each of torch, numpy and random."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(
            [index, torch.rand(()).item(), np.random.rand(), random.random(), WORKER_FLAG],
            dtype=torch.float64,
        )


def set_worker_flag(worker_id: int) -> None:
    global WORKER_FLAG
    WORKER_FLAG = 7


def take(loader: Any, count: int) -> list[list[list[float]]]:
    """The first ``count`` batches of ``loader`` as nested lists."""
    return [batch.tolist() for batch in islice(iter(loader), count)]


def indices(batches: list[list[list[float]]]) -> list[list[int]]:
    return [[int(row[0]) for row in batch] for batch in batches]
