"""detsamplers.testing: check that your own pipeline resumes exactly.

``check_resume`` runs a loader you build, straight and paused at chosen batches, saves
and reloads its state as a checkpoint would, resumes it on a fresh loader (optionally
with another ``num_workers``, world size or batch size) and compares every batch
exactly. ``check_trial_resume`` does the same for a whole
:class:`~detsamplers.trial.Trial` and compares the weights. ``pause_points`` and
``configs`` are hypothesis strategies (they need hypothesis) for pause points and
configurations, and the pytest plugin gives tests a ``resume_check`` fixture.

Examples:
    >>> from detsamplers.loader import DataLoader
    >>> from detsamplers.testing import Config, check_resume
    >>> def factory(rank, world_size, num_workers):
    ...     return DataLoader(range(12), batch_size=3, shuffle=True, num_workers=num_workers)
    >>> check_resume(factory, pauses=[1, 3], batches=5).pauses
    [1, 3]
"""

from typing import Any

from ._compare import first_difference
from ._config import Config
from ._resume import ResumeReport, check_resume
from ._route import StateRoute
from ._trial import check_trial_resume

__all__ = [
    "Config",
    "ResumeReport",
    "StateRoute",
    "check_resume",
    "check_trial_resume",
    "configs",
    "first_difference",
    "pause_points",
]


def __getattr__(name: str) -> Any:
    # The strategies need hypothesis, a test-time dependency: imported on first use.
    if name in ("configs", "pause_points"):
        from . import _strategies

        return getattr(_strategies, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
