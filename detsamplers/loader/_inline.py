"""Small batches travel from the workers by value instead of through shared memory.

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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud

__all__ = ["INLINE_BYTES", "InlineBatch", "InlineCollate"]

#: Batches whose tensors hold fewer bytes than this travel by value (64 KiB).
INLINE_BYTES = 64 * 1024

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


def _to_arrays(data: Any, budget: list[int]) -> Any:
    """``data`` with its tensors as :class:`_Array`; raise :class:`_NotInlineError` if it cannot."""
    if isinstance(data, torch.Tensor):
        if not _inlinable(data):
            raise _NotInlineError
        budget[0] -= data.numel() * data.element_size()
        if budget[0] <= 0:
            raise _NotInlineError
        return _Array(data.numpy())
    kind = type(data)
    if kind is list or kind is tuple:
        return kind(_to_arrays(item, budget) for item in data)
    if kind is dict:
        return {key: _to_arrays(value, budget) for key, value in data.items()}
    return data


def _to_tensors(data: Any) -> Any:
    if type(data) is _Array:
        return torch.from_numpy(data.array)
    kind = type(data)
    if kind is list or kind is tuple:
        return kind(_to_tensors(item) for item in data)
    if kind is dict:
        return {key: _to_tensors(value) for key, value in data.items()}
    return data


def _unpack(payload: Any) -> Any:
    """Rebuild a batch sent inline (what unpickling an :class:`InlineBatch` returns)."""
    return _to_tensors(payload)


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
        self.payload = _to_arrays(batch, [INLINE_BYTES])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpack, (self.payload,))


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
            return data
