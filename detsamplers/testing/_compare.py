"""Exact comparison of batches: the first element where two nested values differ.

NOTE [ exact comparison ]
Two batches are equal when they have the same structure and every leaf is equal
exactly: tensors by dtype, shape and every element (``torch.equal``; NaN equals NaN at
the same place, as the stream of a resumed run must reproduce the very same bits), numpy
arrays likewise, and any other leaf (a string, a number, ``None``) by ``==``. Mappings
compare key by key, lists and tuples item by item, dataclasses field by field, so a
difference is reported at a path such as ``['image'][3]`` with the index of the first
differing element inside the leaf.

A leaf of a type without an ``__eq__`` of its own compares by identity: two equal
records built by two loaders would always differ, and the check would blame the
pipeline. Such a leaf (and one whose ``==`` raises or gives no bool) is a ``TypeError``
that names its type and the ways out: an ``__eq__``, plain values, or an ``equal(a, b)``
function, which then compares every leaf that is not a tensor, array or plain value.
``unbatch`` splits a collated batch into its records along the first dimension, so that
streams cut into batches of other sizes (another batch size or world size) compare
record by record; a batch of ``detsamplers.tokens.collate_tokens``, whose ``cu_seqlens``
spans the flattened batch, is split back into its sequences, each with its own
``cu_seqlens``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..tokens._features import is_collated, uncollate_tokens

__all__ = ["Difference", "first_difference", "records_of", "unbatch"]

# Leaves that ``==`` compares by value; ``equal`` is asked about every other leaf.
_PLAIN = (str, bytes, int, float, complex, bool, type(None), np.generic)


@dataclass(frozen=True)
class Difference:
    """Where two values first differ: a path, what differs, and the two sides."""

    path: str
    what: str
    expected: str
    got: str

    def describe(self) -> str:
        """One line: ``at <path>: <what>: expected <a>, got <b>``."""
        where = self.path or "the batch itself"
        return f"at {where}: {self.what}: expected {self.expected}, got {self.got}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _array_difference(path: str, expected: Any, got: Any, kind: str) -> Difference | None:
    if expected.dtype != got.dtype:
        return Difference(path, f"{kind} dtype", str(expected.dtype), str(got.dtype))
    if tuple(expected.shape) != tuple(got.shape):
        return Difference(path, f"{kind} shape", str(tuple(expected.shape)), str(tuple(got.shape)))
    a = expected.numpy(force=True) if isinstance(expected, torch.Tensor) else np.asarray(expected)
    b = got.numpy(force=True) if isinstance(got, torch.Tensor) else np.asarray(got)
    same = a == b
    if a.dtype.kind in "fc":
        same |= np.isnan(a) & np.isnan(b)
    if bool(np.all(same)):
        return None
    index = tuple(int(i) for i in np.argwhere(~np.asarray(same))[0])
    element = f"element {list(index)}" if index else "value"
    return Difference(path, f"{kind} {element}", _short(a[index].item()), _short(b[index].item()))


def first_difference(
    expected: Any,
    got: Any,
    path: str = "",
    *,
    equal: Callable[[Any, Any], bool] | None = None,
) -> Difference | None:
    """The first place where ``got`` differs from ``expected``, or None if they are equal.

    Args:
        expected: The batch of the uninterrupted run.
        got: The batch of the resumed run.
        path: The path of these values inside the batch (for the report).
        equal: ``equal(a, b) -> bool`` compares the leaves that are not tensors, arrays
            or plain values (your own types); default: their ``==``.

    Raises:
        TypeError: a leaf's type has no ``__eq__`` of its own, or its ``==`` raises or
            gives no bool, and no ``equal`` was given (NOTE [ exact comparison ]).

    Examples:
        >>> import torch
        >>> a = {"x": torch.tensor([[1, 2], [3, 4]]), "name": ["a", "b"]}
        >>> b = {"x": torch.tensor([[1, 2], [3, 5]]), "name": ["a", "b"]}
        >>> first_difference(a, b).describe()
        "at ['x']: tensor element [1, 1]: expected 4, got 5"
        >>> first_difference(a, a) is None
        True
        >>> class Box:
        ...     def __init__(self, label):
        ...         self.label = label
        >>> first_difference([Box("cat")], [Box("dog")], equal=lambda a, b: a.label == b.label)
        Difference(path='[0]', what='value (by equal)', expected='Box', got='Box')
    """
    __tracebackhide__ = True
    if isinstance(expected, torch.Tensor) or isinstance(got, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor)):
            return Difference(path, "type", type(expected).__name__, type(got).__name__)
        return _array_difference(path, expected, got, "tensor")
    if isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        if not (isinstance(expected, np.ndarray) and isinstance(got, np.ndarray)):
            return Difference(path, "type", type(expected).__name__, type(got).__name__)
        return _array_difference(path, expected, got, "array")
    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping):
            return Difference(path, "type", type(expected).__name__, type(got).__name__)
        if list(expected) != list(got):
            return Difference(path, "keys", _short(list(expected)), _short(list(got)))
        for key in expected:
            found = first_difference(expected[key], got[key], f"{path}[{key!r}]", equal=equal)
            if found is not None:
                return found
        return None
    if isinstance(expected, (list, tuple)) and not isinstance(expected, str):
        if not isinstance(got, (list, tuple)) or isinstance(got, str):
            return Difference(path, "type", type(expected).__name__, type(got).__name__)
        if len(expected) != len(got):
            return Difference(path, "length", str(len(expected)), str(len(got)))
        for index, (a, b) in enumerate(zip(expected, got, strict=True)):
            found = first_difference(a, b, f"{path}[{index}]", equal=equal)
            if found is not None:
                return found
        return None
    if type(expected) is not type(got):
        return Difference(path, "type", type(expected).__name__, type(got).__name__)
    if equal is not None and not isinstance(expected, _PLAIN):
        return _by_equal(path, expected, got, equal)
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        for field in dataclasses.fields(expected):
            found = first_difference(
                getattr(expected, field.name), getattr(got, field.name), f"{path}.{field.name}",
                equal=equal,
            )  # fmt: skip
            if found is not None:
                return found
        return None
    return _by_eq(path, expected, got)


def _by_equal(
    path: str, expected: Any, got: Any, equal: Callable[[Any, Any], bool]
) -> Difference | None:
    __tracebackhide__ = True
    same = equal(expected, got)
    if not isinstance(same, (bool, np.bool_)):
        raise TypeError(
            f"equal should return a bool, but for two {type(expected).__name__} at "
            f"{path or 'the top of the batch'} it returned {type(same).__name__}; return "
            "a == b for the fields that matter"
        )
    if same:
        return None
    name = type(expected).__name__
    return Difference(path, "value (by equal)", name, name)


def _cannot_compare(path: str, value: Any, why: str) -> TypeError:
    name = type(value).__qualname__
    return TypeError(
        f"a batch leaf at {path or 'the top of the batch'} is a {name}, which the resume "
        f"check cannot compare ({why}); define {name}.__eq__, return tensors, numpy arrays "
        f"or plain values from the loader, or pass check_resume(..., equal=...) a function "
        f"that tells whether two {name} are equal"
    )


def _by_eq(path: str, expected: Any, got: Any) -> Difference | None:
    __tracebackhide__ = True
    plain = isinstance(expected, _PLAIN)
    if not plain and not any("__eq__" in vars(cls) for cls in type(expected).__mro__[:-1]):
        raise _cannot_compare(
            path, expected, "its class defines no __eq__, so == is identity and two equal "
            "records built by two loaders always differ",
        )  # fmt: skip
    try:
        same = expected == got or (
            isinstance(expected, float) and expected != expected and got != got  # NaN
        )
    except Exception as error:
        raise _cannot_compare(
            path, expected, f"== raised {type(error).__name__}: {error}"
        ) from None
    if not isinstance(same, (bool, np.bool_)):
        raise _cannot_compare(path, expected, f"== gave a {type(same).__name__}, not a bool")
    if same:
        return None
    return Difference(path, "value", _short(expected), _short(got))


def _length(batch: Any) -> int | None:
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return int(batch.shape[0]) if batch.ndim else None
    if is_collated(batch):
        return int(batch["input_ids"].shape[0])  # cu_seqlens spans the flattened batch
    if isinstance(batch, Mapping):
        lengths = {_length(value) for value in batch.values()}
        return lengths.pop() if len(lengths) == 1 else None
    if isinstance(batch, list) and batch and all(isinstance(x, str) for x in batch):
        return len(batch)  # default_collate keeps a list of strings as a list
    if isinstance(batch, (list, tuple)):
        leaves = (list, tuple, Mapping, torch.Tensor, np.ndarray)
        if batch and not any(isinstance(x, leaves) for x in batch):
            return len(batch)  # a batch of plain values: indices, labels
        lengths = {_length(value) for value in batch}
        if len(lengths) == 1:
            return lengths.pop()
    return None


def _record(batch: Any, j: int) -> Any:
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return batch[j]
    if isinstance(batch, Mapping):
        return {key: _record(value, j) for key, value in batch.items()}
    if isinstance(batch, list) and all(isinstance(x, str) for x in batch):
        return batch[j]
    if isinstance(batch, (list, tuple)):
        columns = len({_length(value) for value in batch}) == 1 and _length(batch[0]) is not None
        if not columns:
            return batch[j]
        items = [_record(value, j) for value in batch]
        return items if isinstance(batch, list) else tuple(items)
    raise TypeError(f"cannot split a batch of type {type(batch).__name__} into records")


def records_of(batch: Any) -> int | None:
    """The records in a collated batch (its first dimension), or None if it has none.

    Examples:
        >>> import torch
        >>> records_of({"x": torch.zeros(3, 2), "y": ["a", "b", "c"]})
        3
    """
    return _length(batch)


def unbatch(batch: Any) -> list[Any]:
    """Split a collated batch into its records along the first dimension.

    Raises:
        TypeError: the batch has no common first dimension (a custom batch type).

    Examples:
        >>> import torch
        >>> unbatch((torch.tensor([1, 2]), ["a", "b"]))
        [(tensor(1), 'a'), (tensor(2), 'b')]
    """
    __tracebackhide__ = True
    length = _length(batch)
    if length is None:
        raise TypeError(
            f"cannot split a batch of type {type(batch).__name__} into records: its leaves "
            "have no common first dimension"
        )
    if is_collated(batch):
        return list(uncollate_tokens(batch))
    return [_record(batch, j) for j in range(length)]
