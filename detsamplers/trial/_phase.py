"""What the phases of ``Trainer.fit`` share: the trial's callbacks, run on their ranks.

``fit`` reads top to bottom in phases (NOTE [ training workloads ], _trainer.py): setup →
data → model → load checkpoint (_phase_load.py) → loop: train (_phase_train.py), validate
(_phase_validate.py), checkpoint (_phase_save.py) → close. Each phase is an object built
with what it reads, named (the context, the trial, these callbacks, the checkpoint folder,
the retention policy...), and answers through what its methods return: the phases know
nothing of each other, and ``Trainer`` builds them and passes one's answer to the next.
"""

from __future__ import annotations

import json
from typing import Any

from ._callbacks import CHIEF_ONLY, Callback, call_epoch_start
from ._distributed import DistributedContext
from ._trial import Trial

__all__ = ["Callbacks", "json_or_none", "overrides"]


def overrides(trial: Trial, name: str) -> bool:
    """Whether ``trial``'s class defines its own ``name`` (not :class:`Trial`'s)."""
    return getattr(type(trial), name) is not getattr(Trial, name)


def json_or_none(value: Any) -> Any:
    """``value`` if JSON can hold it, else ``None``."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


class Callbacks:
    """The trial's callbacks by name, each hook run on its ranks (NOTE [ callback ranks ]).

    Args:
        by_name: What ``Trial.build_callbacks`` returned.
        distributed: This process's rank, which decides the chief-only hooks.

    Examples:
        >>> from detsamplers.trial import Callback, DistributedContext
        >>> class Count(Callback):
        ...     def __init__(self): self.ends = 0
        ...     def on_checkpoint_end(self, checkpoint_dir): self.ends += 1
        >>> count = Count()
        >>> Callbacks({"n": count}, DistributedContext(1, 2)).call("on_checkpoint_end", "x")
        >>> Callbacks({"n": count}, DistributedContext(0, 2)).call("on_checkpoint_end", "x")
        >>> count.ends
        1
    """

    def __init__(self, by_name: dict[str, Callback], distributed: DistributedContext) -> None:
        self.by_name = by_name
        self.chief = distributed.is_chief

    def call(self, hook: str, *args: Any) -> None:
        """Run ``hook`` of every callback, on the chief alone if it is chief-only."""
        if hook in CHIEF_ONLY and not self.chief:
            return
        for callback in self.by_name.values():
            getattr(callback, hook)(*args)

    def epoch_start(self, epoch_idx: int) -> None:
        """Run every callback's epoch-start hook (its old name too, as Determined does)."""
        for callback in self.by_name.values():
            call_epoch_start(callback, epoch_idx)
