"""Shared test helpers: a foreign sampler and ``take``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any

import torch.utils.data as tud


class ForeignSampler(tud.Sampler[int]):
    """A sampler detsamplers cannot address: it only iterates (forces the fallback path)."""

    def __init__(self, values: Sequence[int]) -> None:
        self.values = list(values)

    def __iter__(self) -> Iterator[int]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


def take(iterable: Any, n: int) -> list[Any]:
    return list(islice(iter(iterable), n))
