"""``LRScheduler``: a learning-rate scheduler that the trainer steps and checkpoints."""

from __future__ import annotations

import enum
from typing import Any

__all__ = ["LRScheduler"]


class LRScheduler:
    """Wrap a torch LR scheduler with when to step it (made by ``wrap_lr_scheduler``).

    Args:
        scheduler: A ``torch.optim.lr_scheduler`` instance.
        step_mode: Who steps it and when: ``STEP_EVERY_BATCH`` and ``STEP_EVERY_EPOCH``
            are stepped by the trainer after each global batch or epoch (epochs counted
            from records consumed); ``MANUAL_STEP`` is stepped by the trial with ``step()``.

    Examples:
        >>> import torch
        >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        >>> lr = LRScheduler(torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5),
        ...                  LRScheduler.StepMode.MANUAL_STEP)
        >>> opt.step(); lr.step(); lr.get_last_lr()
        [0.5]
    """

    class StepMode(enum.Enum):
        """When a wrapped scheduler is stepped."""

        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3

    def __init__(self, scheduler: Any, step_mode: LRScheduler.StepMode) -> None:
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
        self.scheduler = scheduler
        self.step_mode = step_mode

    def step(self) -> None:
        """Step the scheduler."""
        self.scheduler.step()

    def get_last_lr(self) -> list[float]:
        """The learning rates of the last step."""
        return list(self.scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state."""
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the scheduler's state."""
        self.scheduler.load_state_dict(state_dict)
