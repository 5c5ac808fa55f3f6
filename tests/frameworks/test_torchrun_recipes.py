"""The plain torchrun loop and the DCP loop: exact epochs across a resume on 1 and 2 processes.

examples/torchrun_train.py and examples/dcp_train.py (docs/recipes/) under torchrun: 64
records, a global batch of 8, so an epoch is 8 steps. A run on 2 processes with 2 loader
workers stops at step 3; relaunched, it resumes from its newest checkpoint to step 16: the
plain loop on 2 processes (in the first run's launch, tests/frameworks/run_twice.py) and
on 1, the DCP loop (``dcp.load`` on another world size) on 1. Every record is trained
exactly once in each of the two epochs, and each resume trained only what was left.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .framework_helpers import per_epoch, torchrun, torchrun_twice

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


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_plain_loop_resumes_from_its_checkpoint_on_1_and_2_processes(tmp_path: Path) -> None:
    first, on_2, on_1 = (tmp_path / name for name in ("first", "resumed-on-2", "resumed-on-1"))
    torchrun_twice(
        "torchrun_train.py",
        2,
        (first, on_2),
        ["--out", str(first), *FIRST],
        resume_args(on_2, 4),
        tmp_path / "on-2.log",
    )
    assert sum(per_epoch(first, STEPS_PER_EPOCH)[0].values()) == 3 * 8
    shutil.copytree(first, on_1)
    torchrun("torchrun_train.py", 1, resume_args(on_1, 8), tmp_path / "on-1.log")
    assert_exact(on_1)
    assert_exact(on_2)


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_dcp_loop_resumes_from_dcp_load_on_another_world_size(tmp_path: Path) -> None:
    run = tmp_path / "run"
    torchrun("dcp_train.py", 2, ["--out", str(run), *FIRST], tmp_path / "log")
    assert sum(per_epoch(run, STEPS_PER_EPOCH)[0].values()) == 3 * 8
    torchrun("dcp_train.py", 1, resume_args(run, 8), tmp_path / "log")
    assert_exact(run)
