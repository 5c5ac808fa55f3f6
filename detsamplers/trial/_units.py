"""``Batch`` and ``Epoch``: training lengths, converted to global batches.

An epoch is ``len(dataset)`` records; its length in global batches is
``ceil(len(dataset) / global_batch_size)``, the batches until the records consumed reach
the end of the epoch (the batch that straddles an epoch boundary counts for the earlier
epoch, the same rule ``epoch_idx`` follows).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import check_int

__all__ = ["Batch", "Epoch", "Length", "epoch_of", "to_batches"]


@dataclass(frozen=True)
class Batch:
    """A length in global batches (one optimizer step over ``global_batch_size`` records).

    Examples:
        >>> Batch(100)
        Batch(length=100)
        >>> Batch(0)
        Traceback (most recent call last):
        ...
        ValueError: length should be a positive integer value, but got length=0
    """

    length: int

    def __post_init__(self) -> None:
        check_int("length", self.length, minimum=1)


@dataclass(frozen=True)
class Epoch:
    """A length in epochs, each ``len(dataset)`` records of the training data.

    Examples:
        >>> Epoch(2)
        Epoch(length=2)
    """

    length: int

    def __post_init__(self) -> None:
        check_int("length", self.length, minimum=1)


Length = Batch | Epoch


def to_batches(name: str, length: Length, records_per_epoch: int, global_batch_size: int) -> int:
    """The number of global batches in ``length``.

    Examples:
        >>> to_batches("max_length", Epoch(2), 100, 32)  # 200 records, 7 batches
        7
        >>> to_batches("max_length", Batch(5), 100, 32)
        5
    """
    if isinstance(length, Batch):
        return length.length
    if isinstance(length, Epoch):
        records = length.length * records_per_epoch
        return -(-records // global_batch_size)
    raise TypeError(
        f"{name} should be a Batch or an Epoch, but got {name}={length!r} "
        f"of type {type(length).__name__}"
    )


def epoch_of(batches_trained: int, global_batch_size: int, records_per_epoch: int) -> int:
    """The epoch of the next global batch: records consumed before it, divided by the epoch.

    Examples:
        >>> [epoch_of(b, 32, 100) for b in range(5)]
        [0, 0, 0, 0, 1]
    """
    return batches_trained * global_batch_size // records_per_epoch
