"""Global batch size schedules: the size of each optimizer step, from the samples trained.

NOTE [ batch size schedule ]
``hparams["global_batch_size"]`` is an int, a list of ``[from_sample, size]`` segments
(the first from sample 0, the starts increasing), or a callable of the samples trained
that returns a size. As a function ``size(s)`` of the samples ``s`` trained (all ranks'
records), a list is the size of the last segment whose ``from_sample <= s``.

The size is decided at the start of each optimizer step (every ``aggregation_frequency``-th
global batch, NOTE [ gradient aggregation ]) from the samples trained before it, and kept
for that step's batches, so one step never mixes sizes. A switch at sample ``p`` therefore
takes effect at the first optimizer-step boundary at or after ``p``: the step in flight
across ``p`` keeps the old size, and the next global batch starts at exactly the next
sample of the stream with the new size (NOTE [ sample positions ]): nothing is lost or
repeated. The *realized* schedule of a run, the list of ``(batch, sample, size)`` at which
each size began, is saved in every checkpoint (NOTE [ epoch length ] for epochs).

A resume takes the past from the checkpoint. A plain int is the size from the resume on
(a changed int is accepted, as before). A list or a callable describes the whole run, so
its past must be the one trained: replayed up to the samples trained, it must realize the
saved segments, or the resume is refused naming the first difference. Its future (every
switch after the samples trained) may change freely, so a ramp can be extended or cut on
resume; to change the size from the resume on, add a segment starting at the samples
trained (``samples_trained`` in ``metadata.json``). A callable is called once per
optimizer step, also when its past is replayed on a resume.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import ReproducibilityError

__all__ = ["BatchSchedule", "Segment", "realize"]

#: ``(batch, sample, size)``: the global batch and sample at which a size began.
Segment = tuple[int, int, int]

_NAME = "global_batch_size"
_SHAPE = (
    "a positive int, a list of [from_sample, size] segments starting at sample 0, or a "
    "callable of the samples trained"
)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_size(value: Any, where: str) -> int:
    if not _is_int(value):
        raise TypeError(
            f"{_NAME} should give positive integer sizes, but got {value!r} of type "
            f"{type(value).__name__} {where}; use an int such as 32"
        )
    if value < 1:
        raise ValueError(
            f"{_NAME} should give positive integer sizes, but got {value} {where}; use "
            "a size of at least 1"
        )
    return int(value)


def _check_points(value: Sequence[Any]) -> list[tuple[int, int]]:
    if len(value) == 0:
        raise ValueError(
            f"{_NAME} should have at least one [from_sample, size] segment, but got "
            f"{_NAME}=[]; pass e.g. [[0, 32]]"
        )
    points: list[tuple[int, int]] = []
    for i, segment in enumerate(value):
        if isinstance(segment, (str, bytes)) or not isinstance(segment, (list, tuple)):
            raise TypeError(
                f"{_NAME} segment {i} should be a [from_sample, size] pair, but got "
                f"{segment!r} of type {type(segment).__name__}; write e.g. [[0, 32], [10000, 64]]"
            )
        if len(segment) != 2:
            raise ValueError(
                f"{_NAME} segment {i} should be a [from_sample, size] pair, but got "
                f"{list(segment)!r} with {len(segment)} items; write e.g. [[0, 32], [10000, 64]]"
            )
        start, size = segment
        if not _is_int(start):
            raise TypeError(
                f"{_NAME} segment {i} should start at an integer sample, but got "
                f"from_sample={start!r} of type {type(start).__name__}"
            )
        size = _check_size(size, f"in segment {i} ({list(segment)!r})")
        if i == 0 and start != 0:
            raise ValueError(
                f"{_NAME} should start at sample 0, but its first segment is "
                f"{list(segment)!r}; add a first segment [0, size]"
            )
        if i and start <= points[-1][0]:
            raise ValueError(
                f"{_NAME} segments should start at increasing samples, but segment {i} "
                f"{list(segment)!r} starts at or before segment {i - 1} "
                f"{list(points[-1])!r}; sort the segments and drop duplicates"
            )
        points.append((int(start), size))
    return points


class BatchSchedule:
    """A checked global batch size schedule (NOTE [ batch size schedule ]).

    Args:
        value: An int, a list of ``[from_sample, size]`` segments, or a callable.

    Raises:
        TypeError: ``value``, a segment, a start or a size has the wrong type.
        ValueError: no segment, a first segment not from 0, starts that do not
            increase, or a size below 1.

    Examples:
        >>> ramp = BatchSchedule([[0, 8], [100, 16]])
        >>> [ramp.size_at(s) for s in (0, 99, 100, 1000)]
        [8, 8, 16, 16]
        >>> ramp.sizes_from(50), ramp.describe()
        ([8, 16], [[0, 8], [100, 16]])
        >>> BatchSchedule([[0, 8], [0, 16]])
        Traceback (most recent call last):
        ...
        ValueError: global_batch_size segments should start at increasing samples, but segment 1 [0, 16] starts at or before segment 0 [0, 8]; sort the segments and drop duplicates
    """  # noqa: E501

    def __init__(self, value: Any) -> None:
        self.value = value
        self.constant: int | None = None
        self.points: list[tuple[int, int]] | None = None
        self.function: Callable[[int], Any] | None = None
        if _is_int(value):
            self.constant = _check_size(value, f"({_NAME}={value})")
        elif isinstance(value, (list, tuple)):
            self.points = _check_points(value)
            self._starts = [start for start, _ in self.points]
        elif callable(value):
            self.function = value
        else:
            raise TypeError(
                f"{_NAME} should be {_SHAPE}, but got {_NAME}={value!r} of type "
                f"{type(value).__name__}"
            )

    @property
    def is_plain(self) -> bool:
        """Whether it is a plain int (the size from now on, NOTE [ batch size schedule ])."""
        return self.constant is not None

    def size_at(self, samples: int) -> int:
        """The size of an optimizer step that starts after ``samples`` samples."""
        if self.constant is not None:
            return self.constant
        if self.points is not None:
            return self.points[bisect.bisect_right(self._starts, samples) - 1][1]
        assert self.function is not None
        return _check_size(self.function(samples), f"from {_NAME}({samples})")

    def next_switch(self, samples: int) -> int | None:
        """The first segment start after ``samples`` (a list only; else ``None``)."""
        if self.points is None:
            return None
        i = bisect.bisect_right(self._starts, samples)
        return self._starts[i] if i < len(self._starts) else None

    def sizes_from(self, samples: int) -> list[int] | None:
        """The sizes used at or after ``samples``; ``None`` for a callable (unknown)."""
        if self.constant is not None:
            return [self.constant]
        if self.points is None:
            return None
        first = bisect.bisect_right(self._starts, samples) - 1
        return [size for _, size in self.points[first:]]

    def describe(self) -> Any:
        """A JSON value: the int, the segments, or ``"callable <name>"``."""
        if self.constant is not None:
            return self.constant
        if self.points is not None:
            return [[start, size] for start, size in self.points]
        name = getattr(self.function, "__qualname__", type(self.function).__name__)
        return f"callable {name}"


def realize(
    schedule: BatchSchedule, aggregation: int, samples_end: int, start: Segment = (0, 0, 0)
) -> list[Segment]:
    """The segments ``schedule`` realizes from ``start`` until ``samples_end`` samples.

    ``start`` is ``(batch, sample, size)`` at an optimizer-step boundary (size 0: take
    the schedule's). A list jumps from switch to switch (O(segments)); a callable is
    called once per optimizer step.

    Examples:
        >>> realize(BatchSchedule([[0, 8], [20, 12]]), 1, 60)
        [(0, 0, 8), (3, 24, 12)]
        >>> realize(BatchSchedule([[0, 8], [20, 12]]), 2, 60)  # steps of 2 batches of 8
        [(0, 0, 8), (4, 32, 12)]
    """
    batch, sample, size = start
    if size == 0:
        size = schedule.size_at(sample)
    segments: list[Segment] = [(batch, sample, size)]
    while sample < samples_end:
        step = aggregation * size
        if schedule.function is None:
            switch = schedule.next_switch(sample)
            if switch is None:
                break
            steps = max(1, -(-(switch - sample) // step))  # to the first boundary >= switch
        else:
            steps = 1
        if sample + steps * step >= samples_end and schedule.function is None:
            break
        batch, sample = batch + steps * aggregation, sample + steps * step
        new = schedule.size_at(sample)
        if new != size:
            segments.append((batch, sample, new))
            size = new
    return segments


def check_past(
    path: str, schedule: BatchSchedule, aggregation: int, saved: list[Segment], samples: int
) -> None:
    """Refuse a list or callable schedule whose past differs from the saved segments.

    Raises:
        ReproducibilityError: replayed to ``samples``, ``schedule`` realizes other
            segments than ``saved`` (the message names the first difference).
    """
    if schedule.is_plain:
        return
    replayed = [s for s in realize(schedule, aggregation, samples) if s[1] < samples]
    past = [s for s in saved if s[1] < samples]
    if replayed == past:
        return
    at = next(
        (i for i, (a, b) in enumerate(zip(replayed, past, strict=False)) if a != b),
        min(len(replayed), len(past)),
    )
    here = list(replayed[at]) if at < len(replayed) else "no segment"
    there = list(past[at]) if at < len(past) else "no segment"
    raise ReproducibilityError(
        f"cannot resume from {path}: global_batch_size replayed to the {samples} samples "
        f"trained gives {here} as (batch, sample, size) segment {at} but the checkpoint "
        f"trained {there}; a schedule may change only after the samples trained. Restore its "
        f"past (the checkpoint trained the segments {[list(s) for s in past]}), or pass an int "
        "to set the size from the resume on"
    )
