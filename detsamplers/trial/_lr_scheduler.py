"""``LRScheduler``: a learning-rate scheduler that the trainer steps and checkpoints.

NOTE [ scheduler stepping ]
After each global batch whose optimizer step ran (every ``aggregation_frequency``-th
batch, NOTE [ gradient aggregation ]) the trainer steps each wrapped scheduler as
Determined's trial controller does, with ``f = frequency`` and ``A`` the aggregation
frequency, at batch index ``b``:

- ``STEP_EVERY_BATCH``: once for each ``i`` in ``(b - A, b]`` with ``(i + 1) % f == 0``;
- ``STEP_EVERY_OPTIMIZER_STEP``: once if ``(b + 1) % f == 0``;
- ``STEP_EVERY_EPOCH``: once for each epoch ``e`` in ``[epoch(b), epoch(b + A))`` with
  ``(e + 1) % f == 0``, i.e. when the next optimizer step lands in the next epoch
  (epochs as in NOTE [ epoch length ], also under a batch size schedule);
- ``MANUAL_STEP``: never; the trial calls ``step()``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from .._errors import check_int

__all__ = ["LRScheduler", "auto_step"]


class LRScheduler:
    """Wrap a torch LR scheduler with when to step it (made by ``wrap_lr_scheduler``).

    Args:
        scheduler: A ``torch.optim.lr_scheduler`` instance.
        step_mode: Who steps it and when (NOTE [ scheduler stepping ]).
        frequency: Step every ``frequency`` batches, optimizer steps or epochs.

    Examples:
        >>> import torch
        >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        >>> lr = LRScheduler(torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5),
        ...                  LRScheduler.StepMode.MANUAL_STEP)
        >>> opt.step(); lr.step(); lr.get_last_lr()
        [0.5]
    """

    class StepMode(enum.Enum):
        """When a wrapped scheduler is stepped (Determined's names and values)."""

        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(self, scheduler: Any, step_mode: LRScheduler.StepMode, frequency: int = 1) -> None:
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise TypeError(
                "step_mode should be an LRScheduler.StepMode, but got "
                f"step_mode={step_mode!r} of type {type(step_mode).__name__}"
            )
        if not (callable(getattr(scheduler, "step", None)) and hasattr(scheduler, "state_dict")):
            raise TypeError(
                "scheduler should be a torch LR scheduler with step() and state_dict(), but got "
                f"{type(scheduler).__name__}"
            )
        self.frequency = check_int("frequency", frequency, minimum=1)
        self.scheduler = scheduler
        self.step_mode = step_mode

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Step the scheduler (arguments are passed on, e.g. a metric for ReduceLROnPlateau)."""
        self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        """The learning rates of the last step."""
        return list(self.scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state."""
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the scheduler's state."""
        self.scheduler.load_state_dict(state_dict)


def auto_step(
    scheduler: LRScheduler,
    batch_idx: int,
    aggregation_frequency: int,
    batches_per_epoch: int | Callable[[int], int],
) -> int:
    """Step ``scheduler`` after the optimizer step of batch ``batch_idx``; return the steps.

    Call it only after batches whose optimizer step ran (NOTE [ scheduler stepping ]).
    ``batches_per_epoch`` is an epoch's length in batches, or a function that gives the
    epoch of the batch ``n`` batches after ``batch_idx`` (the trainer's clock).

    Examples:
        >>> import torch
        >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        >>> every = LRScheduler(torch.optim.lr_scheduler.StepLR(opt, 1),
        ...                     LRScheduler.StepMode.STEP_EVERY_BATCH, frequency=2)
        >>> opt.step()
        >>> [auto_step(every, b, 1, 10) for b in range(4)]
        [0, 1, 0, 1]
    """
    mode, frequency, steps = scheduler.step_mode, scheduler.frequency, 0
    if mode == LRScheduler.StepMode.STEP_EVERY_BATCH:
        for i in range(batch_idx - aggregation_frequency + 1, batch_idx + 1):
            if (i + 1) % frequency == 0:
                steps += 1
    elif mode == LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP:
        steps = int((batch_idx + 1) % frequency == 0)
    elif mode == LRScheduler.StepMode.STEP_EVERY_EPOCH:
        if callable(batches_per_epoch):
            here, following = batches_per_epoch(0), batches_per_epoch(aggregation_frequency)
        else:
            here = batch_idx // batches_per_epoch
            following = (batch_idx + aggregation_frequency) // batches_per_epoch
        steps = sum(1 for e in range(here, following) if (e + 1) % frequency == 0)
    for _ in range(steps):
        scheduler.step()
    return steps
