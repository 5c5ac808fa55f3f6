"""Chain sources: what the bottom link of a chain is, and how any sampler becomes a node.

A source turns positions into dataset indices (NOTE [ position algebra ] in _node.py):
``IndexSource`` addresses a range or an index array directly; ``ForeignSource`` only
iterates a sampler it does not know, so a chain over it falls back to iterating.
``as_node`` wraps whatever a stage is given (one of our stages, a torch sampler, a range,
an index array, a torch ``BatchSampler``) as a link.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import torch.utils.data as tud

from ._batch import BatchSource
from ._node import Clock, Kind, Node, chain_of, check_reach

__all__ = [
    "Clock",
    "ForeignSource",
    "IndexSource",
    "Kind",
    "Node",
    "as_node",
    "chain_of",
    "check_reach",
]

I64 = npt.NDArray[np.int64]


class IndexSource(Node):
    """A source whose position ``p`` is ``values[p % n]``: SequentialSampler, range, arrays."""

    indexable = True

    def __init__(self, name: str, values: range | I64) -> None:
        self._name = name
        self._values = values
        self._n = len(values)
        self._identity = isinstance(values, range) and values.start == 0 and values.step == 1
        self._digest: str | None = None

    @property
    def pass_length(self) -> int:
        return self._n

    def records(self, positions: I64) -> I64:
        if self._n == 0:
            return np.zeros(0, dtype=np.int64)
        offsets: I64 = positions - (positions // self._n) * self._n
        if self._identity:
            return offsets
        if isinstance(self._values, range):
            out: I64 = self._values.start + offsets * self._values.step
            return out
        return self._values[offsets]

    def fallback_pass(self, epoch: int) -> Iterator[Any]:
        return iter(self._values.tolist() if isinstance(self._values, np.ndarray) else self._values)

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self._name, "length": self._n}
        if not self._identity:
            if self._digest is None:
                data = (
                    np.asarray(self._values, dtype=np.int64).tobytes()
                    if isinstance(self._values, np.ndarray)
                    else repr(self._values).encode()
                )
                self._digest = hashlib.blake2b(data, digest_size=8).hexdigest()
            out["values"] = self._digest
        return out


class ForeignSource(Node):
    """A sampler detsamplers cannot address: it is only iterated, pass after pass."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj
        self.kind = "batch" if isinstance(obj, tud.BatchSampler) else "record"

    @property
    def obj(self) -> Any:
        """The sampler it iterates."""
        return self._obj

    @property
    def pass_length(self) -> int:
        try:
            return len(self._obj)
        except TypeError:
            return 0

    def fallback_pass(self, epoch: int) -> Iterator[Any]:
        return iter(self._obj)

    def config(self) -> dict[str, Any]:
        try:
            length: int | None = len(self._obj)
        except TypeError:
            length = None
        kind = type(self._obj)
        return {"source": f"{kind.__module__}.{kind.__qualname__}", "length": length}


def as_node(obj: Any) -> Node:
    """Wrap ``obj`` (one of our stages, a torch sampler, a range, an index array) as a node."""
    if isinstance(obj, Node):
        return obj
    if type(obj) is tud.SequentialSampler:
        return IndexSource("SequentialSampler", range(len(obj.data_source)))
    if isinstance(obj, range):
        return IndexSource("range", obj)
    if type(obj) is tud.BatchSampler:
        return BatchSource(obj, as_node(obj.sampler))
    if isinstance(obj, (list, tuple, np.ndarray)):
        values = np.asarray(obj)
        if values.ndim == 1 and values.dtype.kind in "iu" and len(values):
            return IndexSource("sequence", values.astype(np.int64))
    return ForeignSource(obj)
