"""Batches leave the workers by value when small, in one shared storage when large.

NOTE [ inline batches ]
torch sends every tensor a worker returns through shared memory. With its default
``file_descriptor`` strategy on Linux, the worker moves the storage to a new shared-memory
file, and the main process, to unpickle it, connects to the worker's resource-sharer
thread (an authenticated socket handshake) to receive the file descriptor, then maps it.
Whatever the tensor's size, the handshake waits for the worker's GIL. For batches of 32
indices with two workers, ``benchmarks/loader_table.py`` measured 359 us of main-process CPU
a batch and 342 us in the workers for torch's loader, and 78 and 116 us for this one.

:class:`InlineCollate` wraps the collate function in the workers. When the collated batch
is a tree of lists, tuples and dicts whose tensors are plain strided CPU tensors of a
dtype numpy has, not requiring grad, and together under :data:`INLINE_BYTES`, it returns
an :class:`InlineBatch`, which pickles the tensors as numpy arrays (bytes, in the message
itself); unpickling in the main process gives back the same tree with ``torch.from_numpy``
tensors. Anything else (a larger batch, other tensors) is returned as is and travels
torch's way; containers of other types (a namedtuple, an ``OrderedDict``) are pickled as
usual, the tensors inside them torch's way. The values, dtypes and shapes are the same
either way; the tensors of an inline batch are not in shared memory (``is_shared()`` is
false), their storage is numpy's (it cannot be resized), and two tensors that shared a
storage in the worker arrive as separate copies. In the main process (``num_workers=0``) the
batch is never pickled and the wrapper returns it untouched.

A larger batch pays the handshake once per tensor, and a token batch of five ``(8, 2048)``
arrays pays it five times. So a batch at or above :data:`INLINE_BYTES` that holds two or
more plain CPU tensors not yet in shared memory (a collate that builds its tensors with
numpy, as ``collate_tokens`` does) is a :class:`SharedBatch`: those tensors are copied, at
64-byte aligned offsets, into one new shared-memory storage, which travels torch's way
(one file descriptor, one handshake), and the main process gets them back as views of it.
That copy replaces the one torch makes to move each tensor into shared memory, so the
worker copies no more than before. Tensors already in shared memory (torch's
``default_collate`` allocates them there in a worker) and tensors that cannot be packed
(requiring grad, sparse, a subclass) travel torch's way as before. The values, dtypes and
shapes are the same; a packed tensor arrives contiguous, in shared memory, and keeps the
whole batch's storage alive while it lives. The threshold of 1 MiB: with two workers on
a shared 2-core machine (load 17 to 18, one run each), a batch of five int64 tensors cost
the main process 1.4 to 1.6 ms of CPU by value, 1.7 to 2.0 ms in one storage and 3.8 to
4.7 ms torch's way at 0.66 MB; at 10.5 MB, 22 to 28 ms by value, 4.3 to 4.6 ms in one
storage and 7.3 to 8.2 ms torch's way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud

__all__ = ["INLINE_BYTES", "InlineBatch", "InlineCollate", "SharedBatch"]

#: Batches whose tensors hold fewer bytes than this travel by value (1 MiB).
INLINE_BYTES = 1024 * 1024
#: Alignment of each tensor inside a :class:`SharedBatch`'s storage, in bytes.
_ALIGN = 64

_NUMPY_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    }
)


class _NotInlineError(Exception):
    """The batch holds something that cannot travel by value (internal control flow)."""


class _Array:
    """A tensor's values as a numpy array, inside an :class:`InlineBatch`."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray[Any, Any]) -> None:
        self.array = array


def _inlinable(tensor: torch.Tensor) -> bool:
    return (
        type(tensor) is torch.Tensor
        and tensor.layout == torch.strided
        and tensor.device.type == "cpu"
        and tensor.dtype in _NUMPY_DTYPES
        and not tensor.requires_grad
        and not tensor.is_conj()
        and not tensor.is_neg()
    )


def _map_leaves(data: Any, leaf: Callable[[Any], Any]) -> Any:
    """``data`` with each leaf replaced by ``leaf(it)``, visited depth first in order.

    The containers walked are exactly ``list``, ``tuple`` and ``dict`` (not their subclasses,
    which are leaves: a namedtuple is pickled as usual); each is rebuilt as its own type.
    """
    kind = type(data)
    if kind is list or kind is tuple:
        return kind([_map_leaves(item, leaf) for item in data])
    if kind is dict:
        return {key: _map_leaves(value, leaf) for key, value in data.items()}
    return leaf(data)


def _to_array(budget: list[int], data: Any) -> Any:
    """A tensor as an :class:`_Array`; raise :class:`_NotInlineError` if it cannot travel so."""
    if not isinstance(data, torch.Tensor):
        return data
    if not _inlinable(data):
        raise _NotInlineError
    budget[0] -= data.numel() * data.element_size()
    if budget[0] <= 0:
        raise _NotInlineError
    return _Array(data.numpy())


def _to_tensor(data: Any) -> Any:
    return torch.from_numpy(data.array) if type(data) is _Array else data


def _unpack(payload: Any) -> Any:
    """Rebuild a batch sent inline (what unpickling an :class:`InlineBatch` returns)."""
    return _map_leaves(payload, _to_tensor)


class InlineBatch:
    """A collated batch whose tensors pickle by value; unpickles to the plain batch.

    Raises:
        _NotInlineError: the batch holds a tensor that cannot travel by value, or its tensors
            hold :data:`INLINE_BYTES` or more.

    Examples:
        >>> import pickle, torch
        >>> batch = InlineBatch({"x": torch.arange(3), "y": [torch.ones(2), "label"]})
        >>> pickle.loads(pickle.dumps(batch))
        {'x': tensor([0, 1, 2]), 'y': [tensor([1., 1.]), 'label']}
    """

    __slots__ = ("payload",)

    def __init__(self, batch: Any) -> None:
        self.payload = _map_leaves(batch, partial(_to_array, [INLINE_BYTES]))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpack, (self.payload,))


class _Part:
    """Where a packed tensor lies in a :class:`SharedBatch`'s storage."""

    __slots__ = ("dtype", "offset", "shape")

    def __init__(self, dtype: torch.dtype, shape: tuple[int, ...], offset: int) -> None:
        self.dtype, self.shape, self.offset = dtype, shape, offset


def _packable(tensor: torch.Tensor) -> bool:
    return (
        type(tensor) is torch.Tensor
        and tensor.layout == torch.strided
        and tensor.device.type == "cpu"
        and not tensor.requires_grad
        and not tensor.is_conj()
        and not tensor.is_neg()
        and not tensor.is_shared()  # type: ignore[no-untyped-call]
    )


class _Parts:
    """Turns each packable tensor into a :class:`_Part` at the next aligned offset."""

    __slots__ = ("found", "offset")

    def __init__(self) -> None:
        self.found: list[tuple[_Part, torch.Tensor]] = []
        self.offset = 0

    def __call__(self, data: Any) -> Any:
        if not isinstance(data, torch.Tensor) or not _packable(data):
            return data  # torch's way
        part = _Part(data.dtype, tuple(data.shape), self.offset)
        self.found.append((part, data))
        size = data.numel() * data.element_size()
        self.offset += -(-size // _ALIGN) * _ALIGN
        return part


def _view(storage: torch.Tensor, part: _Part) -> torch.Tensor:
    size = math.prod(part.shape) * part.dtype.itemsize
    return storage[part.offset : part.offset + size].view(part.dtype).view(part.shape)


def _from_part(storage: torch.Tensor, data: Any) -> Any:
    return _view(storage, data) if type(data) is _Part else data


def _unpack_shared(payload: Any, storage: torch.Tensor) -> Any:
    """Rebuild a packed batch (what unpickling a :class:`SharedBatch` returns)."""
    return _map_leaves(payload, partial(_from_part, storage))


class SharedBatch:
    """A collated batch whose loose tensors travel in one shared-memory storage.

    Raises:
        _NotInlineError: the batch holds fewer than two tensors that can be packed.

    Examples:
        >>> import pickle, torch
        >>> batch = SharedBatch({"x": torch.arange(3), "y": [torch.ones(2, 2), "label"]})
        >>> batch.storage.is_shared(), batch.storage.numel()
        (True, 128)
        >>> pickle.loads(pickle.dumps(batch))
        {'x': tensor([0, 1, 2]), 'y': [tensor([[1., 1.],
                [1., 1.]]), 'label']}
    """

    __slots__ = ("payload", "storage")

    def __init__(self, batch: Any) -> None:
        parts = _Parts()
        self.payload = _map_leaves(batch, parts)
        if len(parts.found) < 2:
            raise _NotInlineError
        # Allocated in shared memory at once, as torch's default_collate does in a worker.
        shared = torch.UntypedStorage._new_shared(parts.offset)  # type: ignore[no-untyped-call]
        self.storage = torch.empty(0, dtype=torch.uint8).set_(shared)
        for part, tensor in parts.found:
            _view(self.storage, part).copy_(tensor)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpack_shared, (self.payload, self.storage))


class InlineCollate:
    """Wrap ``collate_fn`` so that small batches leave a worker by value.

    Args:
        collate_fn: The collate function to wrap.

    Examples:
        >>> import torch
        >>> from torch.utils.data import default_collate
        >>> collate = InlineCollate(default_collate)
        >>> collate([1, 2])  # in the main process: untouched
        tensor([1, 2])
    """

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, batch: Any) -> Any:
        data = self.collate_fn(batch)
        if tud.get_worker_info() is None:
            return data
        try:
            return InlineBatch(data)
        except _NotInlineError:
            pass
        try:
            return SharedBatch(data)
        except _NotInlineError:
            return data
