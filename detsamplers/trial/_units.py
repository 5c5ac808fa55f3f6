"""``Batch`` and ``Epoch``: training lengths and periods, converted to global batches.

NOTE [ epoch length ]
One rule converts every ``Epoch`` (``max_length``, ``validation_period``,
``checkpoint_period``, ``reporting_period``, ``STEP_EVERY_EPOCH``) and ``epoch_idx``:
an epoch is ``ceil(len(dataset) / global_batch_size)`` global batches, Determined's
``len()`` of rank 0's repeated training loader (``drop_last=False``), which is the same on
every world size. ``Epoch(k)`` is ``k`` times that, and the epoch of global batch ``b``
is ``b // epoch_length``. With 2,000 records and a global batch of 64 an epoch is 32
batches: ``max_length=Epoch(3)`` trains 96 and ``Epoch(1)`` periods fire after 32, 64
and 96. The data stream itself stays a stream of records (NOTE [ trial data ]): batch 32
starts at record 2,048 of the shuffled, repeated stream, so an "epoch" of batches holds
``epoch_length * global_batch_size`` records, a few more than the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import check_int

__all__ = ["Batch", "Epoch", "Length", "epoch_length", "epoch_of", "to_batches"]


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

    @property
    def value(self) -> int:
        """The length, under Determined's name for it (``Batch(100).value``)."""
        return self.length


@dataclass(frozen=True)
class Epoch:
    """A length in epochs of ``ceil(len(dataset) / global_batch_size)`` global batches.

    See NOTE [ epoch length ].

    Examples:
        >>> Epoch(2)
        Epoch(length=2)
    """

    length: int

    def __post_init__(self) -> None:
        check_int("length", self.length, minimum=1)

    @property
    def value(self) -> int:
        """The length, under Determined's name for it (``Epoch(3).value``)."""
        return self.length


Length = Batch | Epoch


def epoch_length(records_per_epoch: int, global_batch_size: int) -> int:
    """Global batches in one epoch: ``ceil(records / global_batch_size)`` (at least 1).

    Examples:
        >>> epoch_length(2000, 64)
        32
        >>> epoch_length(10, 64)
        1
    """
    return max(1, -(-records_per_epoch // global_batch_size))


def to_batches(name: str, length: Length, records_per_epoch: int, global_batch_size: int) -> int:
    """The number of global batches in ``length`` (NOTE [ epoch length ]).

    Examples:
        >>> to_batches("max_length", Epoch(3), 2000, 64)
        96
        >>> to_batches("max_length", Batch(5), 100, 32)
        5
    """
    if isinstance(length, Batch):
        return length.length
    if isinstance(length, Epoch):
        return length.length * epoch_length(records_per_epoch, global_batch_size)
    raise TypeError(
        f"{name} should be a Batch or an Epoch, but got {name}={length!r} "
        f"of type {type(length).__name__}"
    )


def epoch_of(batch_idx: int, batches_per_epoch: int) -> int:
    """The epoch of global batch ``batch_idx``: ``batch_idx // batches_per_epoch``.

    Examples:
        >>> [epoch_of(b, 32) for b in (0, 31, 32, 95, 96)]
        [0, 0, 1, 2, 3]
    """
    return batch_idx // batches_per_epoch
