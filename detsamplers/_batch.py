"""Batch: batch ``b`` is the consecutive positions ``[b B, (b + 1) B)`` of the inner stream.

torch's own ``BatchSampler`` is the batching stage (the seeds' example builds the chain with
it). When one of our stages wraps a ``BatchSampler`` whose sampler is addressable, this
node reads its ``batch_size`` and ``drop_last`` and computes any batch directly, so a
``SkipBatchSampler`` over it still seeks in O(1). Over a finite stream each pass ends with
a short batch, or drops it when ``drop_last`` is set, exactly as torch does.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice, pairwise
from typing import Any

import numpy as np
import numpy.typing as npt
import torch.utils.data as tud

from ._node import Node, check_reach

__all__ = ["BatchSource", "split_batches"]

I64 = npt.NDArray[np.int64]


def split_batches(flat: list[int], size: int) -> list[list[int]]:
    """Cut ``flat`` into consecutive lists of ``size`` (the last may be shorter)."""
    return [flat[i : i + size] for i in range(0, len(flat), size)]


class BatchSource(Node):
    """A torch ``BatchSampler`` seen as a chain link, over its sampler already wrapped."""

    kind = "batch"
    verb = "batch"

    def __init__(self, batch_sampler: tud.BatchSampler, inner: Node) -> None:
        self._size = int(batch_sampler.batch_size)
        self._drop_last = bool(batch_sampler.drop_last)
        self._inner = inner  # batch_sampler.sampler as a node (as_node wraps both)
        self.indexable = self._inner.indexable and self._inner.kind == "record"
        self.infinite = self._inner.infinite
        self.clock = self._inner.clock
        self._offsets = np.arange(self._size, dtype=np.int64)

    def inner_node(self) -> Node:
        return self._inner

    @property
    def records_per_item(self) -> int:
        return self._size

    @property
    def pass_length(self) -> int:
        length = self._inner.pass_length
        return length // self._size if self._drop_last else -(-length // self._size)

    def batches(self, positions: I64) -> list[list[int]]:
        size = self._size
        if self.infinite:
            check_reach(positions, size, size, "BatchSampler")
            starts = positions * size
            sizes = None
        else:
            length = self._inner.pass_length
            epoch = positions // self.pass_length
            batch = positions - epoch * self.pass_length
            starts = epoch * length + batch * size
            sizes = np.minimum(size, length - batch * size)
            if int(sizes.min()) == size:
                sizes = None
        if sizes is None:
            flat = self._inner.records((starts[:, None] + self._offsets).ravel()).tolist()
            return split_batches(flat, size)
        ends = np.cumsum(sizes)
        within = np.arange(int(ends[-1]), dtype=np.int64) - np.repeat(ends - sizes, sizes)
        flat = self._inner.records(np.repeat(starts, sizes) + within).tolist()
        bounds = [0, *ends.tolist()]
        return [flat[a:b] for a, b in pairwise(bounds)]

    def _batched(self, records: Iterator[Any]) -> Iterator[list[Any]]:
        while batch := list(islice(records, self._size)):
            if len(batch) < self._size and self._drop_last:
                return
            yield batch

    def fallback_pass(self, epoch: int) -> Iterator[Any]:
        return self._batched(self._inner.fallback_pass(epoch))

    def fallback_stream(self) -> Iterator[Any]:
        return self._batched(self._inner.fallback_stream())

    def config(self) -> dict[str, Any]:
        return {"stage": "batch", "batch_size": self._size, "drop_last": self._drop_last}
