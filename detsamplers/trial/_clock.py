"""``Clock``: where training stands in batches, samples and epochs, and the size in force.

See NOTE [ epoch length ] (in ``_units``) and NOTE [ batch size schedule ].
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from ._schedule import BatchSchedule, Segment
from ._units import Batch, Epoch, Length

__all__ = ["Clock"]


@dataclass
class Clock:
    """Training's position: batches and samples trained, the epoch, the next batch's size.

    ``epoch`` is the epoch of the next global batch and ``epoch_start`` the sample it
    began at; ``size`` is the next batch's global size and ``segments`` the realized
    schedule (NOTE [ batch size schedule ]). :meth:`advance` moves past one global batch.

    Examples:
        >>> clock = Clock(BatchSchedule([[0, 4], [8, 6]]), 1, records=10)
        >>> for _ in range(4):
        ...     clock.advance()
        ...     print(clock.batches, clock.samples, clock.epoch, clock.size)
        1 4 0 4
        2 8 0 6
        3 14 1 6
        4 20 1 6
        >>> clock.segments
        [(0, 0, 4), (2, 8, 6)]
        >>> clock.total(Epoch(3)), clock.total(Batch(9))  # epoch 2 starts at 26, 3 at 38
        (7, 9)
    """

    schedule: BatchSchedule
    aggregation: int
    records: int = 0
    batches: int = 0
    samples: int = 0
    size: int = 0
    epoch: int = 0
    epoch_start: int = 0
    segments: list[Segment] = field(default_factory=list)
    epoch_ended: bool = False

    def __post_init__(self) -> None:
        if self.size == 0:
            self.size = self.schedule.size_at(self.samples)
        if not self.segments:
            self.segments = [(self.batches, self.samples, self.size)]

    def is_epoch_end(self) -> bool:
        """Whether the next global batch is the last of its epoch (it reaches ``N`` records)."""
        return self.samples + self.size >= self.epoch_start + self.records

    def is_epoch_start(self) -> bool:
        """Whether the next global batch is the first of its epoch."""
        return self.samples == self.epoch_start

    def advance(self) -> None:
        """Train one global batch: count it, close the epoch if it is full, pick the size."""
        self.batches += 1
        self.samples += self.size
        self.epoch_ended = self.samples >= self.epoch_start + self.records
        if self.epoch_ended:
            self.epoch, self.epoch_start = self.epoch + 1, self.samples
        if self.batches % self.aggregation == 0:
            size = self.schedule.size_at(self.samples)
            if size != self.size:
                self.size = size
                self.segments.append((self.batches, self.samples, size))

    def epoch_in(self, batches: int) -> int:
        """The epoch of the global batch ``batches`` after the next one."""
        ahead = copy.copy(self)
        ahead.segments = []
        for _ in range(batches):
            ahead.advance()
        return ahead.epoch

    def reached(self, length: Length) -> bool:
        """Whether ``length`` of training (a total, from the run's start) is done."""
        if isinstance(length, Epoch):
            return self.epoch >= length.length
        return self.batches >= length.length

    def due(self, period: Length) -> bool:
        """Whether a period ends with the batch just trained (call after :meth:`advance`)."""
        if isinstance(period, Batch):
            return self.batches % period.length == 0
        return self.epoch_ended and self.epoch % period.length == 0

    def check_world_size(self, world_size: int) -> None:
        """Refuse a schedule with a size from here on that ``world_size`` does not divide."""
        for size in sorted({self.size, *(self.schedule.sizes_from(self.samples) or [])}):
            if size % world_size:
                raise ValueError(
                    f"global_batch_size should give sizes divisible by the world size, but got "
                    f"global_batch_size={self.schedule.describe()!r} whose size {size} is not a "
                    f"multiple of world size {world_size}; use multiples of {world_size}, or "
                    "another number of ranks"
                )

    def batches_per_epoch(self) -> int:
        """Global batches in an epoch at the size in force: ``ceil(N / size)``."""
        return max(1, -(-self.records // self.size))

    def total(self, length: Length, limit: int = 100_000) -> int | None:
        """The batches trained once ``length`` is reached, or ``None`` if over ``limit`` steps.

        It replays the schedule forward (a plain size jumps in one step).
        """
        if isinstance(length, Batch):
            return max(length.length, self.batches)
        ahead = copy.copy(self)
        ahead.segments = []
        for _ in range(limit):
            if ahead.reached(length):
                return ahead.batches
            sizes = ahead.schedule.sizes_from(ahead.samples)
            if sizes is not None and len(sizes) == 1 and ahead.batches % ahead.aggregation == 0:
                left = length.length - ahead.epoch
                first = -(-(ahead.epoch_start + ahead.records - ahead.samples) // ahead.size)
                return ahead.batches + first + (left - 1) * ahead.batches_per_epoch()
            ahead.advance()
        return None

    def metadata(self) -> dict[str, Any]:
        """What a checkpoint records of the clock."""
        return {
            "epoch_index": self.epoch,
            "epoch_start_sample": self.epoch_start,
            "batch_segments": [list(s) for s in self.segments],
        }

    @classmethod
    def restore(
        cls, schedule: BatchSchedule, aggregation: int, saved: dict[str, Any] | None, samples: int
    ) -> Clock:
        """The clock at a checkpoint's ``metadata.json`` (``None``: a fresh run).

        Epochs need the record count: set ``records`` (and :meth:`restore_epoch`) once the
        training data is known.
        """
        if saved is None:
            return cls(schedule, aggregation)
        batches = int(saved["batches_trained"])
        saved_size = int(saved["global_batch_size"])
        raw = saved.get("batch_segments") or [[0, 0, saved_size]]
        segments = [(int(b), int(s), int(g)) for b, s, g in raw]
        # Mid-step (aggregation), the step keeps its size (NOTE [ batch size schedule ]).
        size = saved_size if batches % aggregation else schedule.size_at(samples)
        if size != segments[-1][2]:
            segments.append((batches, samples, size))
        return cls(schedule, aggregation, 0, batches, samples, size, segments=segments)

    def restore_epoch(self, records: int, saved: dict[str, Any] | None) -> None:
        """Set the record count and, from a checkpoint, the epoch (NOTE [ epoch length ])."""
        self.records = records
        if saved is None:
            return
        if "epoch_index" in saved:
            self.epoch = int(saved["epoch_index"])
            self.epoch_start = int(saved["epoch_start_sample"])
            return
        # A checkpoint from before schedules: one size G, epochs of ceil(N / G) batches
        # of the saved N (the dataset may have grown since, NOTE [ trial growth ]).
        size = int(saved["global_batch_size"])
        per_epoch = max(1, -(-int(saved.get("dataset_length", records)) // size))
        self.epoch = self.batches // per_epoch
        self.epoch_start = self.samples - (self.batches % per_epoch) * size
