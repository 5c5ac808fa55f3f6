"""HF Trainer on 2 processes: exact mid-epoch resume from its checkpoints, no replay.

examples/hf_trainer_train.py (docs/recipes/hf-trainer.md) under torchrun: 64 records, a
global batch of 8, so an epoch is 8 steps. A run with 2 loader workers stops at step 3;
``checkpoint-3`` resumes on 2 processes (in the same launch, tests/frameworks/
run_twice.py) and on 1, to step 16: every record is trained exactly once in each of the
two epochs, and each resumed run trained only what was left. The same launch first checks
(tests/frameworks/hf_checks.py) that the recipe's Trainer refuses ``ignore_data_skip=False``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .framework_helpers import HERE, per_epoch, torchrun, torchrun_twice

pytest.importorskip("transformers")

RECORDS = 64
STEPS_PER_EPOCH = 8


def resume_args(run: Path, batch_size: int) -> list[str]:
    args = ["--out", str(run), "--max-steps", "16", "--batch-size", str(batch_size)]
    return [*args, "--resume", str(run / "checkpoint-3")]


def trained(run: Path) -> int:
    return sum(sum(c.values()) for c in per_epoch(run, STEPS_PER_EPOCH).values())


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_hf_trainer_resumes_mid_epoch_on_1_and_2_processes(tmp_path: Path) -> None:
    first, on_2, on_1 = (tmp_path / name for name in ("first", "resumed-on-2", "resumed-on-1"))
    torchrun_twice(
        "hf_trainer_train.py",
        2,
        (first, on_2),
        ["--out", str(first), "--max-steps", "3", "--num-workers", "2"],
        resume_args(on_2, 4),
        tmp_path / "on-2.log",
        checks=HERE / "hf_checks.py",
    )
    for rank in (0, 1):  # the recipe's Trainer refused ignore_data_skip=False
        assert (first / f"hf-checks-rank{rank}.json").exists()
    assert trained(first) == 3 * 8
    shutil.copytree(first, on_1)
    torchrun("hf_trainer_train.py", 1, resume_args(on_1, 8), tmp_path / "on-1.log")
    for run in (on_1, on_2):
        assert trained(run) == 16 * 8, run.name  # the resume trained only what was left
        counts = per_epoch(run, STEPS_PER_EPOCH)
        assert sorted(counts) == [0, 1], run.name
        for epoch, seen in counts.items():
            assert seen == dict.fromkeys(range(RECORDS), 1), (run.name, epoch)
