"""Shared test helpers: a reference model of Determined's sampler rules, and a foreign sampler."""

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


# Reference semantics, written from Determined's rules (not imported from determined).


def ref_shard(items: Sequence[Any], world: int, rank: int) -> list[Any]:
    return [x for i, x in enumerate(items) if i % world == rank]


def ref_batches(items: Sequence[Any], size: int, drop_last: bool) -> list[list[Any]]:
    out = [list(items[i : i + size]) for i in range(0, len(items), size)]
    if drop_last and out and len(out[-1]) < size:
        out.pop()
    return out


def ref_repeat(items: Sequence[Any], n: int) -> list[Any]:
    """The first n items of an endless repetition of items."""
    return [items[i % len(items)] for i in range(n)]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
