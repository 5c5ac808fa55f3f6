"""``Batch`` and ``Epoch``: training lengths and periods, converted to global batches.

NOTE [ epoch length ]
An epoch is the shortest run of whole global batches that holds at least ``N`` samples
(``N = len(dataset)``), starting where the previous epoch ended: epoch ``e`` begins at
sample ``E_e`` (``E_0 = 0``) and ends with the first global batch that reaches sample
``E_e + N``. It is counted in samples, so it holds for any global batch size and any
schedule of them (NOTE [ batch size schedule ]): a switch that falls mid-epoch makes an
epoch of mixed sizes, and the epoch still ends once it holds ``N`` samples. Like
Determined's ``drop_last=False``, the last batch of an epoch is a full batch: its samples
past ``E_e + N`` are the first of the stream's next pass, and the next epoch starts after
them. With one size ``G`` this is Determined's rule, ``ceil(N / G)`` global batches an
epoch (the ``len()`` of rank 0's repeated training loader, on every world size): with
2,000 records and a global batch of 64 an epoch is 32 batches (2,048 samples),
``max_length=Epoch(3)`` trains 96 and ``Epoch(1)`` periods fire after 32, 64 and 96. The
data stream itself stays a stream of records (NOTE [ trial data ]): every record is
trained once in each pass ``[p N, (p + 1) N)`` of the sample stream.

``Epoch(k)`` as ``max_length`` trains until ``k`` epochs are complete; as a period it
fires when an epoch ends whose count is a multiple of ``k``. ``epoch_idx`` is the epoch of
the batch; the checkpoint records the epoch and the sample it began at, so a resume with
another size continues the same epoch. ``Batch(k)`` counts global batches (optimizer
steps, times ``aggregation_frequency``) of whatever size.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import check_int

__all__ = ["Batch", "Epoch", "Length", "check_length", "epoch_length", "epoch_of", "to_batches"]


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
    """A length in epochs: runs of global batches that hold ``len(dataset)`` samples.

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


def check_length(name: str, length: Length) -> Length:
    """``length`` if it is a ``Batch`` or an ``Epoch``, else a ``TypeError`` naming ``name``.

    Examples:
        >>> check_length("max_length", 10)
        Traceback (most recent call last):
        ...
        TypeError: max_length should be a Batch or an Epoch, but got max_length=10 of type int
    """
    if not isinstance(length, (Batch, Epoch)):
        raise TypeError(
            f"{name} should be a Batch or an Epoch, but got {name}={length!r} "
            f"of type {type(length).__name__}"
        )
    return length


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
