"""The pytest plugin (entry point ``pytest11``): the ``resume_check`` fixture.

Once detsamplers is installed (docs/getting-started.md), a test can take the fixture without
importing anything::

    def test_my_pipeline_resumes(resume_check):
        resume_check(make_loader, pauses=[3, 7], batches=10)

``resume_check`` is :func:`detsamplers.testing.check_resume`, and
``trial_resume_check`` is :func:`detsamplers.testing.check_trial_resume` with its
checkpoints in the test's ``tmp_path``. The plugin imports torch only when a test asks
for a fixture, so that it costs nothing to other test suites.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["resume_check", "trial_resume_check"]


@pytest.fixture
def resume_check() -> Callable[..., Any]:
    """``check_resume(factory, pauses, *, batches, run, resume, route)`` for this test."""
    from ._resume import check_resume

    def check(factory: Callable[..., Any], pauses: Any = (2,), **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return check_resume(factory, pauses, **kwargs)

    return check


@pytest.fixture
def trial_resume_check(tmp_path: Path) -> Callable[..., None]:
    """``check_trial_resume(trial_class, hparams, pauses, ...)``, checkpoints in tmp_path."""
    from ._trial import check_trial_resume

    def check(trial_class: type[Any], hparams: dict[str, Any], pauses: Any = (2,),
              **kwargs: Any) -> None:  # fmt: skip
        __tracebackhide__ = True
        kwargs.setdefault("workdir", str(tmp_path))
        check_trial_resume(trial_class, hparams, pauses, **kwargs)

    return check
