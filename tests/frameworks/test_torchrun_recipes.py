"""The plain torchrun loop and the DCP loop: exact epochs across a resume on 1 and 2 processes.

examples/torchrun_train.py and examples/dcp_train.py (docs/recipes/) under torchrun: 64
records, a global batch of 8, so an epoch is 8 steps. A run on 2 processes with 2 loader
workers stops at step 3; relaunched, it resumes from its newest checkpoint to step 16: the
plain loop on 2 processes (in the first run's launch, tests/frameworks/run_twice.py) and
on 1, the DCP loop (``dcp.load`` on another world size) on 1. Every record is trained
exactly once in each of the two epochs, and each resume trained only what was left.

Both loops share two launches (:func:`runs`): one on 2 processes (the plain loop's first run
and its resume, then the DCP loop's first run), one on 1 (both resumes), instead of four: a
launch's agent and ranks each import torch first, most of a short run's CPU time.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .framework_helpers import per_epoch, torchrun_in_turn, torchrun_twice

RECORDS = 64
STEPS_PER_EPOCH = 8
FIRST = ["--max-steps", "3", "--batch-size", "4", "--num-workers", "2"]


def resume_args(run: Path, batch_size: int) -> list[str]:
    return ["--out", str(run), "--max-steps", "16", "--batch-size", str(batch_size)]


def assert_exact(run: Path) -> None:
    counts = per_epoch(run, STEPS_PER_EPOCH)
    assert sum(sum(c.values()) for c in counts.values()) == 16 * 8, run.name  # nothing twice
    assert sorted(counts) == [0, 1], run.name
    for epoch, seen in counts.items():
        assert seen == dict.fromkeys(range(RECORDS), 1), (run.name, epoch)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runs of both loops, each first run also kept as it stopped (``*-stopped``)."""
    work = tmp_path_factory.mktemp("recipes")
    first, on_2, on_1, dcp = (work / name for name in ("first", "on-2", "on-1", "dcp"))
    torchrun_twice(
        "torchrun_train.py",
        2,
        (first, on_2),
        ["--out", str(first), *FIRST],
        resume_args(on_2, 4),
        work / "on-2.log",
        then=[("dcp_train.py", ["--out", str(dcp), *FIRST])],
    )
    shutil.copytree(first, on_1)
    shutil.copytree(dcp, work / "dcp-stopped")
    runs = [("torchrun_train.py", resume_args(on_1, 8)), ("dcp_train.py", resume_args(dcp, 8))]
    torchrun_in_turn(1, runs, work / "on-1.log")
    return work


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_plain_loop_resumes_from_its_checkpoint_on_1_and_2_processes(runs: Path) -> None:
    assert sum(per_epoch(runs / "first", STEPS_PER_EPOCH)[0].values()) == 3 * 8
    assert_exact(runs / "on-1")
    assert_exact(runs / "on-2")


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_dcp_loop_resumes_from_dcp_load_on_another_world_size(runs: Path) -> None:
    assert sum(per_epoch(runs / "dcp-stopped", STEPS_PER_EPOCH)[0].values()) == 3 * 8
    assert_exact(runs / "dcp")
