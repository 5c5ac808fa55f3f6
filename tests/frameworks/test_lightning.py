"""Lightning with its default settings on 2 processes: exact epochs, exact mid-epoch resume.

examples/lightning_train.py (docs/recipes/lightning.md) under torchrun: 64 records, a
global batch of 8 (4 per rank, or 8 on one), gradient accumulation over 2 batches, so an
epoch is 4 optimizer steps. A run stops at step 3 (mid-epoch, with 2 loader workers); its
Lightning checkpoint resumes on 2 processes (in the same launch, tests/frameworks/
run_twice.py) and on 1, to the end of the second epoch.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .framework_helpers import per_epoch, torchrun, torchrun_twice

pytest.importorskip("lightning")

RECORDS = 64
STEPS_PER_EPOCH = 4


def resume_args(run: Path, batch_size: int) -> list[str]:
    args = ["--out", str(run), "--max-steps", "8", "--batch-size", str(batch_size)]
    return [*args, "--resume", str(run / "checkpoints" / "step=3.ckpt")]


@pytest.mark.distributed
@pytest.mark.frameworks
def test_lightning_resumes_mid_epoch_from_its_checkpoint_on_1_and_2_processes(
    tmp_path: Path,
) -> None:
    first, on_2, on_1 = (tmp_path / name for name in ("first", "resumed-on-2", "resumed-on-1"))
    torchrun_twice(
        "lightning_train.py",
        2,
        (first, on_2),
        ["--out", str(first), "--max-steps", "3", "--num-workers", "2"],
        resume_args(on_2, 4),
        tmp_path / "on-2.log",
    )
    assert (first / "checkpoints" / "step=3.ckpt").exists()
    stopped = per_epoch(first, STEPS_PER_EPOCH)
    assert sum(stopped[0].values()) == 3 * 2 * 8  # 3 steps of 2 batches of 8 records
    shutil.copytree(first, on_1)
    torchrun("lightning_train.py", 1, resume_args(on_1, 8), tmp_path / "on-1.log")
    for run in (on_1, on_2):
        counts = per_epoch(run, STEPS_PER_EPOCH)
        assert sorted(counts) == [0, 1], run.name
        for epoch, seen in counts.items():
            assert seen == dict.fromkeys(range(RECORDS), 1), (run.name, epoch)
    for log in ("on-1.log", "on-2.log"):
        assert "not resumable" not in (tmp_path / log).read_text()
