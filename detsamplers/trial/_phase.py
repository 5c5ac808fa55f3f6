"""The template every phase of ``Trainer.fit`` follows: the trainer's state, and its callbacks.

``fit`` reads top to bottom in phases (NOTE [ training workloads ], _trainer.py): setup →
data → model → load checkpoint (_phase_load.py) → loop: train (_phase_train.py), validate
(_phase_validate.py), checkpoint (_phase_save.py) → close. Each phase is a class over this
one, which holds what every phase reads (the trial, its context, the callbacks, the stop
signals, the retention policy, the last validation) and calls callbacks on their ranks
(NOTE [ callback ranks ]); the phases know nothing of each other, and ``Trainer`` is their
sum plus the loop.
"""

from __future__ import annotations

import json
from typing import Any

from . import _preemption, _retention
from ._callbacks import CHIEF_ONLY, Callback
from ._context import TrialContext
from ._trial import Trial

__all__ = ["Phase"]


def _overrides(trial: Trial, name: str) -> bool:
    return getattr(type(trial), name) is not getattr(Trial, name)


def _json_or_none(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


class Phase:
    """What every phase of ``Trainer.fit`` reads: the trial, its context and the run's state."""

    def __init__(self, trial: Trial, context: TrialContext) -> None:
        if not isinstance(trial, Trial):
            raise TypeError(f"trial should be a Trial, but got {type(trial).__name__}")
        self.trial = trial
        self.context = context
        self.callbacks: dict[str, Callback] = {}
        self._retention = _retention.Retention("none", None, True)
        self._last_validation: tuple[int, dict[str, Any]] = (-1, {})
        self._signals = _preemption.StopSignals(())
        self._weights_only = True

    def _stop_code(self, signals: _preemption.StopSignals) -> int:
        if signals.received is not None:
            return _preemption.SIGNALLED
        return _preemption.REQUESTED if self.context.get_stop_requested() else 0

    def _call(self, hook: str, *args: Any) -> None:
        """Run ``hook`` of every callback on its ranks (NOTE [ callback ranks ])."""
        if hook in CHIEF_ONLY and not self.context.distributed.is_chief:
            return
        for callback in self.callbacks.values():
            getattr(callback, hook)(*args)
