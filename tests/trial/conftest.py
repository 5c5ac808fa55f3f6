"""The trial tests' shared fixture: one run of the demo, whose runs several tests read."""

from __future__ import annotations

from pathlib import Path

import pytest

from detsamplers.trial._demo import run_demo


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[bool, list[str], Path]:
    """The demo's runs: 2 ranks straight, paused at 20 and resumed on 1, and preempted by
    SIGTERM after batch 20 and relaunched with ``"auto"`` (``reference/`` holds the straight
    run's checkpoints, records and ``weights.pt``)."""
    work = tmp_path_factory.mktemp("demo")
    lines: list[str] = []
    ok = run_demo(ranks=2, pause_at=20, resume_ranks=1, workdir=str(work), echo=lines.append)
    return ok, lines, work
